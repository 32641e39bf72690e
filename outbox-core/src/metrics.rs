//! Metric names, emitted through the [`metrics`](https://docs.rs/metrics) facade.
//!
//! Install any `metrics` recorder (Prometheus, StatsD, …) to collect them; the
//! example app serves them at `/metrics` with `metrics-exporter-prometheus`
//! (which writes the dots as underscores: `outbox_processed`). Tags:
//! `category` (the category name), `kind` (`region` or `control`) and
//! `synchronous` (`true` for the flush after a commit, `false` for the
//! background drain).
//!
//! Counters and histograms are emitted where things happen. The gauges
//! ([`BACKLOG_DEPTH`], [`BACKLOG_OLDEST_AGE`], [`FAILING_SHARDS`],
//! [`QUARANTINED_SHARDS`], [`PAUSED_SHARDS`], [`PARKED_SHARDS`], [`DEAD_TUPLES`],
//! [`OLDEST_TRANSACTION_AGE`], [`DEAD_LETTERS`], [`SCOPE_BACKLOG_DEPTH`],
//! [`SCOPE_BACKLOG_OLDEST_AGE`]) are kept up to date by the background worker,
//! every `WorkerBuilder::gauge_interval` (15 s), from
//! [`DrainView::backlog`](crate::DrainView::backlog).

/// Counter: outbox rows written (tags: category, kind).
pub const SAVED: &str = "outbox.saved";
/// Counter: outbox rows deleted after delivery (tags: category, kind, synchronous).
pub const PROCESSED: &str = "outbox.processed";
/// Counter: rows deleted without a delivery of their own because a newer
/// row of the same (category, object) was delivered (tags: category, kind,
/// synchronous). Included in [`PROCESSED`].
pub const COALESCED: &str = "outbox.coalesced";
/// Counter: successful deliveries of a shard that had failed before, the
/// first after its failures (tags: category, kind, synchronous).
pub const RETRIED: &str = "outbox.retried";
/// Histogram, seconds: the synchronous flush of one shard after a commit,
/// from its claim to its commit (tags: kind, outcome = `delivered` or
/// `failed`).
pub const FLUSH_DURATION: &str = "outbox.flush.duration";
/// Histogram, seconds: from the delivered group's oldest `scheduled_from` to
/// delivery (tags: category, kind, synchronous).
pub const PROCESSING_LAG: &str = "outbox.processing_lag";
/// Histogram, seconds: from the delivered group's oldest `date_added` to
/// delivery (tags: category, kind, synchronous).
pub const COALESCED_NET_QUEUE_TIME: &str = "outbox.coalesced_net_queue_time";
/// Histogram, seconds: time spent in the receiver, the delivery duration
/// (tags: category, kind, synchronous).
pub const SEND_SIGNAL_DURATION: &str = "outbox.send_signal.duration";
/// Counter: failed deliveries (tags: category, kind, synchronous, reason).
pub const DELIVERY_FAILED: &str = "outbox.delivery_failed";
/// Counter: rows met whose category this binary does not know (tags: kind,
/// category_value). Such a row holds its shard until a binary that knows it runs.
pub const UNKNOWN_CATEGORY: &str = "outbox.unknown_category";
/// Counter: shards parked on a payload version their receiver does not
/// know, a producer deployed ahead of it (tags: category, kind, version).
/// Each parking counts once, and again every `DrainConfig::park_interval`
/// while the receiver is not upgraded.
pub const PARKED: &str = "outbox.parked";
/// Counter: rows culled by an operator's control (tags: kind).
pub const CULLED: &str = "outbox.culled";
/// Counter: shard claims found expired or taken at commit (tags: kind).
pub const CLAIM_LOST: &str = "outbox.claim_lost";
/// Counter: shards quarantined after a permanent error, in scopes that do
/// not dead-letter (tags: category, kind).
pub const QUARANTINED: &str = "outbox.quarantined";
/// Counter: rows moved to the dead-letter table (tags: category, kind).
pub const DEAD_LETTERED: &str = "outbox.dead_lettered";
/// Counter: claims of cancelled rounds ended before their lease ran out
/// (tags: kind). See `Drainer::release_abandoned`.
pub const ABANDONED_CLAIMS_RELEASED: &str = "outbox.abandoned_claims_released";
/// Counter: messages a sink published that the broker reported as
/// duplicates of one it had stored (a redelivery after a crash or a lost
/// acknowledgement, dropped by the broker; tags: sink = `jetstream`,
/// category, kind). See [`crate::sink`].
pub const SINK_DUPLICATES: &str = "outbox.sink.duplicates";
/// Counter: redeliveries an inbox recognised and skipped: the message had
/// been applied, then its delivery did not reach the outbox delete (tags:
/// consumer). See `outbox_seaorm::inbox`.
pub const INBOX_DUPLICATES: &str = "outbox.inbox.duplicates";
/// Counter: deliveries a fenced receiver refused as superseded: their
/// fencing token was lower than one it had applied for the shard, so they
/// came from a worker that lost its claim (tags: category, consumer). See
/// [`crate::fence`].
pub const SUPERSEDED: &str = "outbox.superseded";
/// Counter: inbox rows deleted after their retention (no tags).
pub const INBOX_PRUNED: &str = "outbox.inbox.pruned";
/// Counter: drained partitions of an outbox table emptied with `TRUNCATE`,
/// PostgreSQL only (tags: kind). See `outbox_seaorm::ring`.
pub const RING_TRUNCATED: &str = "outbox.ring.truncated";
/// Counter: drained partitions left for the next try because another
/// transaction held a lock on them past the lock timeout (tags: kind). A
/// steady rise means something keeps the outbox table open: a long
/// transaction that read it, or `pg_dump`.
pub const RING_BUSY: &str = "outbox.ring.busy";
/// Gauge: rows pending in the outbox table (tags: kind).
pub const BACKLOG_DEPTH: &str = "outbox.backlog.depth";
/// Gauge, seconds: how long the oldest pending row has waited, 0 when none
/// is (tags: kind).
pub const BACKLOG_OLDEST_AGE: &str = "outbox.backlog.oldest_age";
/// Gauge: shards backing off after a failure, not quarantined (tags: kind).
pub const FAILING_SHARDS: &str = "outbox.failing_shards";
/// Gauge: shards quarantined after a permanent error, waiting for an
/// operator (tags: kind).
pub const QUARANTINED_SHARDS: &str = "outbox.quarantined_shards";
/// Gauge: shards parked by an operator's pause (tags: kind).
pub const PAUSED_SHARDS: &str = "outbox.paused_shards";
/// Gauge: shards parked on a payload version their receiver does not know,
/// waiting for a deploy of a receiver that knows it (tags: kind). Not
/// counted in [`FAILING_SHARDS`].
pub const PARKED_SHARDS: &str = "outbox.parked_shards";
/// Gauge: dead tuples of the outbox table, PostgreSQL only (tags: kind).
pub const DEAD_TUPLES: &str = "outbox.table.dead_tuples";
/// Gauge, seconds: age of the database's oldest open transaction (which
/// holds back vacuum), 0 when none or unknown (tags: kind).
pub const OLDEST_TRANSACTION_AGE: &str = "outbox.oldest_transaction_age";
/// Gauge: rows in the dead-letter table (tags: kind).
pub const DEAD_LETTERS: &str = "outbox.dead_letters";
/// Gauge: rows pending per scope, 0 for a declared scope with none (tags:
/// kind, scope = the scope's name).
pub const SCOPE_BACKLOG_DEPTH: &str = "outbox.scope.backlog.depth";
/// Gauge, seconds: how long a scope's oldest pending row has waited, 0 when
/// none (tags: kind, scope).
pub const SCOPE_BACKLOG_OLDEST_AGE: &str = "outbox.scope.backlog.oldest_age";
