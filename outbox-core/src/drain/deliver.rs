//! Delivering one claimed shard: decides its [`ShardOutcome`], applies
//! nothing. The round commits the outcomes.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use tracing::Instrument;

use super::claim::to_chrono;
use super::drainer::{Drainer, DELIVERING};
use super::lease::LeaseEnd;
use super::observe;
use super::report::{DeliveryError, ShardFailure};
use crate::coalesce::{coalesce, CoalescingGroup};
use crate::control::ControlAction;
use crate::fence::FencingToken;
use crate::message::Message;
use crate::registry::{Category, Scope};
use crate::shard::ShardKey;
use crate::store::{ClaimedShard, DeadLetter, ShardCommit, ShardEnd, ShardState};
use crate::trace;

/// The last error of a shard parked by a pause.
pub(crate) const PAUSED: &str = "paused by an operator";

/// What delivering one shard decided.
#[derive(Debug)]
pub(crate) struct ShardOutcome {
    /// What to commit for it.
    pub(crate) commit: ShardCommit,
    /// Delivered groups: category name and rows acknowledged.
    pub(crate) delivered: Vec<(&'static str, usize)>,
    /// Rows culled by an operator's control.
    pub(crate) culled: usize,
    /// Failed deliveries (dead-lettered ones included).
    pub(crate) failures: Vec<ShardFailure>,
    /// The shard was backing off and left alone.
    pub(crate) backing_off: bool,
    /// Its lease ended by this process's clock before it was delivered in
    /// full: the rest was not sent.
    pub(crate) gave_up: bool,
}

impl ShardOutcome {
    fn new(shard: ShardKey, end: ShardEnd) -> Self {
        Self {
            commit: ShardCommit {
                shard,
                delete_ids: Vec::new(),
                dead_letters: Vec::new(),
                end,
            },
            delivered: Vec::new(),
            culled: 0,
            failures: Vec::new(),
            backing_off: false,
            gave_up: false,
        }
    }

    /// A shard left as it was: nothing delivered, nothing deleted.
    pub(crate) fn untouched(shard: ShardKey) -> Self {
        Self::new(shard, ShardEnd::Done)
    }

    /// A shard that backs off until its `retry_at`: nothing delivered, new
    /// rows rescheduled to it.
    pub(crate) fn waiting(shard: ShardKey, state: &ShardState) -> Self {
        let mut outcome = Self::new(
            shard,
            ShardEnd::Wait {
                retry_at: state.retry_at,
            },
        );
        outcome.backing_off = true;
        outcome
    }
}

/// Whether `claimed` must be left alone now: it backs off after a failure.
pub(crate) fn is_backing_off<C: Category>(drainer: &Drainer<C>, claimed: &ClaimedShard) -> bool {
    claimed
        .state
        .as_ref()
        .is_some_and(|state| state.retry_at > drainer.now())
}

/// Delivers a claimed shard's rows in order, stopping at the first failure
/// that its scope does not dead-letter.
pub(crate) async fn deliver_shard<C: Category>(
    drainer: &Drainer<C>,
    claimed: ClaimedShard,
    lease: &LeaseEnd,
    synchronous: bool,
    stack: Arc<Vec<ShardKey>>,
) -> ShardOutcome {
    let ClaimedShard {
        shard,
        rows,
        state,
        fence,
    } = claimed;
    let recovered_end = if state.is_some() {
        ShardEnd::Recovered
    } else {
        ShardEnd::Done
    };
    let mut outcome = ShardOutcome::new(shard.clone(), recovered_end.clone());
    if rows.is_empty() {
        return outcome;
    }
    let groups = coalesce(rows, |category| {
        C::try_from(category).map_or(true, |category| category.coalesces())
    });
    let mut attempts = state.as_ref().map_or(0, |s| s.attempts);
    let mut last_backoff = state.as_ref().and_then(|s| s.last_backoff);

    match drainer.controls().action_for(&shard) {
        None => {}
        Some(ControlAction::Cull) => {
            // An operator drops this shard's rows: none is delivered.
            for group in &groups {
                outcome.commit.delete_ids.extend_from_slice(&group.ids);
                outcome.culled += group.ids.len();
            }
            outcome.commit.end = if state.is_some() {
                ShardEnd::Recovered
            } else {
                ShardEnd::Done
            };
            tracing::info!(%shard, culled = outcome.culled, "outbox shard culled by an operator");
            return outcome;
        }
        Some(ControlAction::Pause) => {
            // Parked: claims pass it by until the pause is lifted.
            outcome.commit.end = ShardEnd::Backoff {
                retry_at: crate::paused_until(),
                delay: last_backoff.unwrap_or_default(),
                error: PAUSED.to_owned(),
                attempts,
            };
            tracing::info!(%shard, "outbox shard paused by an operator: parked");
            return outcome;
        }
    }

    let stack = Arc::new({
        let mut stack = Vec::clone(&stack);
        stack.push(shard.clone());
        stack
    });
    let mut dead_lettered_any = false;
    let mut retrying = attempts > 0;
    for mut group in groups {
        if !lease.allows_call(drainer.now(), drainer.config().lease_margin()) {
            // Rule 12, the sender's half: the lease ended by this process's
            // clock (it was paused, or starved, past it), so another worker
            // may hold the shard and deliver newer rows. Nothing more is
            // called; what was delivered is committed if the lease is still
            // live, and the rest waits for the next claim.
            observe::claims_lost(shard.kind(), 1, "the lease ended before a delivery");
            if outcome.delivered.is_empty() && !dead_lettered_any {
                outcome.commit.end = ShardEnd::Done;
            }
            outcome.gave_up = true;
            return outcome;
        }
        let error =
            match deliver_group(drainer, &mut group, fence, synchronous, stack.clone()).await {
                Ok(category) => {
                    observe::delivered_group(
                        category.name(),
                        shard.kind(),
                        synchronous,
                        group.ids.len(),
                        retrying,
                    );
                    retrying = false;
                    drainer.recovery().succeeded(group.category(), &shard);
                    outcome.commit.delete_ids.extend_from_slice(&group.ids);
                    outcome.delivered.push((category.name(), group.ids.len()));
                    continue;
                }
                Err(error) => error,
            };
        attempts = attempts.saturating_add(1);
        retrying = true;
        let category_name = C::try_from(group.category()).ok().map(|c| c.name());
        observe::delivery_failed(&shard, category_name, synchronous, &error);
        let policy = drainer.dead_letter_policy().attempts_for(shard.scope());
        // A permanent error is dead-lettered at once where the scope allows
        // dead letters at all, and quarantines the shard otherwise.
        let dead_letter = policy.is_some_and(|max| attempts >= max || error.is_permanent());
        if !dead_letter && error.is_permanent() {
            observe::quarantined(&shard, &group, category_name, &error);
            let retry_at = crate::quarantined_until();
            outcome.commit.end = ShardEnd::Backoff {
                retry_at,
                delay: last_backoff.unwrap_or(drainer.config().backoff.initial()),
                error: error.to_string(),
                attempts,
            };
            outcome.failures.push(failure(
                &shard,
                &group,
                category_name,
                retry_at,
                false,
                error,
            ));
            return outcome;
        }
        if dead_letter {
            // The scope gives up on this group: move it aside and go on with
            // the shard, which is healthy again.
            observe::dead_lettered(&shard, &group, category_name, attempts, &error);
            outcome.commit.dead_letters.push(DeadLetter {
                ids: group.ids.clone(),
                error: error.to_string(),
            });
            outcome.failures.push(failure(
                &shard,
                &group,
                category_name,
                drainer.now(),
                true,
                error,
            ));
            attempts = 0;
            last_backoff = None;
            dead_lettered_any = true;
            continue;
        }
        drainer.recovery().backed_off(group.category(), &shard);
        let end = backoff_end(drainer, last_backoff, &error.to_string(), attempts);
        let retry_at = match &end {
            ShardEnd::Backoff { retry_at, .. } => *retry_at,
            _ => drainer.now(),
        };
        tracing::warn!(
            %shard,
            id = group.newest.id,
            category = category_name.unwrap_or("unknown"),
            attempts,
            %retry_at,
            error = %error,
            "outbox delivery failed; shard rescheduled"
        );
        outcome.failures.push(failure(
            &shard,
            &group,
            category_name,
            retry_at,
            false,
            error,
        ));
        outcome.commit.end = end;
        return outcome;
    }
    // A dead-lettered group started the shard's failure count over: a state
    // row, if any, goes; the shard is healthy.
    if dead_lettered_any && state.is_some() {
        outcome.commit.end = ShardEnd::Recovered;
    }
    if outcome.commit.end == ShardEnd::Recovered {
        drainer.recovery().recovered(&shard);
    }
    outcome
}

fn failure(
    shard: &ShardKey,
    group: &CoalescingGroup,
    category_name: Option<&'static str>,
    retry_at: chrono::DateTime<chrono::Utc>,
    dead_lettered: bool,
    error: DeliveryError,
) -> ShardFailure {
    ShardFailure {
        shard: shard.clone(),
        id: group.newest.id,
        category: group.category(),
        category_name,
        object_identifier: group.object_identifier(),
        retry_at,
        dead_lettered,
        error,
    }
}

fn backoff_end<C: Category>(
    drainer: &Drainer<C>,
    last_backoff: Option<std::time::Duration>,
    error: &str,
    attempts: u32,
) -> ShardEnd {
    let delay = drainer.config().backoff.next_delay(last_backoff);
    ShardEnd::Backoff {
        retry_at: drainer.now() + to_chrono(delay),
        delay,
        error: error.to_owned(),
        attempts,
    }
}

/// Delivers one coalescing group to its receiver.
async fn deliver_group<C: Category>(
    drainer: &Drainer<C>,
    group: &mut CoalescingGroup,
    fence: FencingToken,
    synchronous: bool,
    stack: Arc<Vec<ShardKey>>,
) -> Result<C, DeliveryError> {
    let newest = &group.newest;
    let category = C::try_from(newest.category).map_err(|unknown| {
        observe::unknown_category(newest, unknown.0);
        DeliveryError::UnknownCategory(unknown)
    })?;
    let expected_scope = category.scope().value();
    if expected_scope != newest.shard.scope() {
        return Err(DeliveryError::ScopeMismatch {
            category: category.name(),
            expected_scope,
            row_scope: newest.shard.scope(),
        });
    }
    let handler = drainer
        .receivers()
        .handler(category)
        .ok_or(DeliveryError::NoReceiver {
            category: category.name(),
        })?;
    // Moved, not copied: the group needs its ids after the delivery, not
    // its payload (a retry reads the row again).
    let payload = group.newest.payload.take();
    let newest = &group.newest;
    let message = Message {
        id: newest.id,
        first_id: group.first.id,
        coalesced: group.ids.len(),
        shard: newest.shard.clone(),
        fence,
        category,
        object_identifier: newest.object_identifier,
        payload,
        date_added: group.first.date_added,
        scheduled_for: newest.scheduled_for,
        scheduled_from: newest.scheduled_from,
        synchronous,
        traceparent: newest.traceparent,
        message_id: newest.message_id,
    };
    let span = trace::delivery_span(category, group, synchronous);
    let timeout = drainer.config().delivery_timeout;
    let started = Instant::now();
    // The span is entered while the handler's future is built too: a
    // receiver that opens its span before its first `.await` nests it there.
    let call = span.in_scope(|| AssertUnwindSafe(handler(message)).catch_unwind());
    let call = crate::message::with_delivery(
        crate::message::CurrentDelivery {
            message_id: newest.message_id,
            shard: newest.shard.clone(),
            fence,
            category: category.name(),
        },
        call,
    );
    let result = DELIVERING
        .scope(stack, tokio::time::timeout(timeout, call))
        .instrument(span.clone())
        .await;
    let elapsed = started.elapsed();
    drainer.planner().pace().observe(elapsed);
    observe::send_duration(category.name(), newest.shard.kind(), synchronous, elapsed);
    let result = match result {
        Err(_elapsed) => Err(DeliveryError::Timeout(timeout)),
        Ok(Err(panic)) => Err(DeliveryError::Panicked(panic_message(panic.as_ref()))),
        Ok(Ok(Err(error))) => Err(DeliveryError::Handler(error)),
        Ok(Ok(Ok(()))) => {
            observe::delivered_lag(category.name(), group, synchronous, drainer.now());
            Ok(category)
        }
    };
    if let Err(error) = &result {
        trace::delivery_failed(&span, error.reason());
    }
    result
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
