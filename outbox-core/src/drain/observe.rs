//! Metrics and logs of the drain, apart from its decisions. Names are the
//! constants of [`crate::metrics`].

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::report::DeliveryError;
use crate::coalesce::CoalescingGroup;
use crate::message::StoredRow;
use crate::metrics as names;
use crate::shard::{OutboxKind, ShardKey};

fn sync_tag(synchronous: bool) -> &'static str {
    if synchronous {
        "true"
    } else {
        "false"
    }
}

fn seconds_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6
}

pub(crate) fn send_duration(
    category: &'static str,
    kind: OutboxKind,
    synchronous: bool,
    elapsed: Duration,
) {
    metrics::histogram!(names::SEND_SIGNAL_DURATION, "category" => category, "kind" => kind.as_str(), "synchronous" => sync_tag(synchronous))
        .record(elapsed.as_secs_f64());
}

pub(crate) fn delivered_lag(
    category: &'static str,
    kind: OutboxKind,
    first_scheduled_from: DateTime<Utc>,
    first_added: DateTime<Utc>,
    synchronous: bool,
    now: DateTime<Utc>,
) {
    let kind = kind.as_str();
    let sync = sync_tag(synchronous);
    metrics::histogram!(names::PROCESSING_LAG, "category" => category, "kind" => kind, "synchronous" => sync)
        .record(seconds_between(first_scheduled_from, now));
    metrics::histogram!(names::COALESCED_NET_QUEUE_TIME, "category" => category, "kind" => kind, "synchronous" => sync)
        .record(seconds_between(first_added, now));
}

pub(crate) fn processed(category: &'static str, kind: OutboxKind, synchronous: bool, rows: usize) {
    metrics::counter!(names::PROCESSED, "category" => category, "kind" => kind.as_str(), "synchronous" => sync_tag(synchronous))
        .increment(rows as u64);
}

/// A group was delivered: its older rows were coalesced away, and the
/// delivery was a retry if its shard had failed before.
pub(crate) fn delivered_group(
    category: &'static str,
    kind: OutboxKind,
    synchronous: bool,
    rows: usize,
    retried: bool,
) {
    let (kind, sync) = (kind.as_str(), sync_tag(synchronous));
    if rows > 1 {
        metrics::counter!(names::COALESCED, "category" => category, "kind" => kind, "synchronous" => sync)
            .increment(rows as u64 - 1);
    }
    if retried {
        metrics::counter!(names::RETRIED, "category" => category, "kind" => kind, "synchronous" => sync)
            .increment(1);
    }
}

/// The synchronous flush of one shard took `elapsed`.
pub(crate) fn flushed(kind: OutboxKind, delivered: bool, elapsed: Duration) {
    let outcome = if delivered { "delivered" } else { "failed" };
    metrics::histogram!(names::FLUSH_DURATION, "kind" => kind.as_str(), "outcome" => outcome)
        .record(elapsed.as_secs_f64());
}

pub(crate) fn culled(kind: OutboxKind, rows: usize) {
    if rows > 0 {
        metrics::counter!(names::CULLED, "kind" => kind.as_str()).increment(rows as u64);
    }
}

pub(crate) fn delivery_failed(
    shard: &ShardKey,
    category: Option<&'static str>,
    synchronous: bool,
    error: &DeliveryError,
) {
    metrics::counter!(
        names::DELIVERY_FAILED,
        "category" => category.unwrap_or("unknown"),
        "kind" => shard.kind().as_str(),
        "synchronous" => sync_tag(synchronous),
        "reason" => error.reason()
    )
    .increment(1);
}

pub(crate) fn dead_lettered(
    shard: &ShardKey,
    group: &CoalescingGroup,
    category: Option<&'static str>,
    attempts: u32,
    error: &DeliveryError,
) {
    tracing::error!(
        %shard,
        id = group.newest.id,
        category = category.unwrap_or("unknown"),
        attempts,
        error = %error,
        "outbox group dead-lettered"
    );
    metrics::counter!(names::DEAD_LETTERED, "category" => category.unwrap_or("unknown"), "kind" => shard.kind().as_str())
        .increment(group.ids.len() as u64);
}

pub(crate) fn quarantined(
    shard: &ShardKey,
    group: &CoalescingGroup,
    category: Option<&'static str>,
    error: &DeliveryError,
) {
    tracing::error!(
        %shard,
        id = group.newest.id,
        category = category.unwrap_or("unknown"),
        error = %error,
        "outbox shard quarantined after a permanent error: nothing of it is delivered until \
         an operator releases it (StoreAdmin::retry_now)"
    );
    metrics::counter!(names::QUARANTINED, "category" => category.unwrap_or("unknown"), "kind" => shard.kind().as_str())
        .increment(1);
}

pub(crate) fn parked(
    shard: &crate::shard::ShardKey,
    group: &crate::coalesce::CoalescingGroup,
    unknown: &crate::registry::contract::UnknownVersion,
    retry_at: chrono::DateTime<chrono::Utc>,
) {
    metrics::counter!(names::PARKED, "category" => unknown.category, "kind" => shard.kind().as_str(), "version" => unknown.version.to_string())
        .increment(1);
    tracing::warn!(
        %shard,
        id = group.newest.id,
        category = unknown.category,
        version = unknown.version,
        known = ?unknown.known,
        %retry_at,
        "outbox shard parked: its payload version is newer than this receiver knows; deploy \
         the receiver that knows it"
    );
}

pub(crate) fn unknown_category(row: &StoredRow, value: i32) {
    metrics::counter!(names::UNKNOWN_CATEGORY, "kind" => row.shard.kind().as_str(), "category_value" => value.to_string())
        .increment(1);
    tracing::error!(
        shard = %row.shard,
        id = row.id,
        category = value,
        "outbox row has a category this binary does not know; its shard is held"
    );
}

pub(crate) fn claims_lost(kind: OutboxKind, shards: usize, why: &'static str) {
    if shards == 0 {
        return;
    }
    metrics::counter!(names::CLAIM_LOST, "kind" => kind.as_str()).increment(shards as u64);
    tracing::warn!(
        kind = kind.as_str(),
        shards,
        why,
        "outbox claims ended before their commit; their rows will be delivered again"
    );
}

pub(crate) fn abandoned_released(kind: OutboxKind, claims: u64) {
    metrics::counter!(names::ABANDONED_CLAIMS_RELEASED, "kind" => kind.as_str()).increment(claims);
}

/// Registers, at 0, the counters alerts count the first increase of
/// (dead letters, quarantines, failed deliveries, lost claims, culls) for
/// every live category and each of `kinds`. A counter that only appears
/// with its first event starts at 1, and `increase()` over it reads 0:
/// an alert on "dead letters appearing" would miss the first one.
pub(crate) fn register_series<C: crate::registry::Category>(kinds: &[OutboxKind]) {
    for &kind in kinds {
        let kind = kind.as_str();
        metrics::counter!(names::CLAIM_LOST, "kind" => kind).increment(0);
        metrics::counter!(names::CULLED, "kind" => kind).increment(0);
        metrics::counter!(names::ABANDONED_CLAIMS_RELEASED, "kind" => kind).increment(0);
        for category in C::ALL.iter().filter(|category| !category.is_retired()) {
            let category = category.name();
            metrics::counter!(names::DEAD_LETTERED, "category" => category, "kind" => kind)
                .increment(0);
            metrics::counter!(names::QUARANTINED, "category" => category, "kind" => kind)
                .increment(0);
            for synchronous in [false, true] {
                let sync = sync_tag(synchronous);
                metrics::counter!(names::PROCESSED, "category" => category, "kind" => kind, "synchronous" => sync)
                    .increment(0);
                metrics::counter!(names::DELIVERY_FAILED, "category" => category, "kind" => kind, "synchronous" => sync, "reason" => "handler")
                    .increment(0);
            }
        }
    }
}
