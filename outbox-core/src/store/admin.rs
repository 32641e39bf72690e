//! Inspection and administration: what operators and tests use.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::count::Count;
use super::drain::ShardState;
use super::error::StoreError;
use crate::audit::{AuditEntry, AuditRecord};
use crate::control::{ControlTarget, RuntimeControl};
use crate::history::Sample;
use crate::message::StoredRow;
use crate::shard::{OutboxKind, ShardKey};

/// A pending shard, for inspection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardDepth {
    /// The shard.
    pub shard: ShardKey,
    /// Rows pending: [`Exact`](Count::Exact) up to the read's cap (from
    /// [`StoreAdmin::snapshot`] on PostgreSQL: up to 10 rows), else an
    /// estimate or at least that many.
    pub depth: Count,
    /// When its oldest pending row was written.
    pub oldest_date_added: DateTime<Utc>,
    /// The earliest `scheduled_for` of its rows (of the first `cap + 1` by
    /// id, when its depth is not exact).
    pub next_scheduled_for: DateTime<Utc>,
}

/// A shard that failed and has not succeeded since.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailingShard {
    /// The shard.
    pub shard: ShardKey,
    /// Its backoff state: attempts, last delay and error, next attempt.
    pub state: ShardState,
}

/// A dead-lettered row.
#[derive(Clone, Debug, PartialEq)]
pub struct DeadLetterRow {
    /// The row as it was in the outbox.
    pub row: StoredRow,
    /// Why it was dead-lettered.
    pub error: String,
    /// When.
    pub dead_lettered_at: DateTime<Utc>,
}

/// One table's pending and failing shards and dead letters, read at one
/// point in time (one transaction), with counts capped
/// ([`StoreAdmin::snapshot`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminSnapshot {
    /// The table.
    pub kind: OutboxKind,
    /// Rows pending: exact up to the cap, above it estimated or at least
    /// the cap.
    pub pending: Count,
    /// The deepest shards, deepest first: of every shard when the table
    /// holds at most `cap` rows, else of the shards holding its oldest
    /// `cap + 1` rows (by id). A store may count each listed shard up to
    /// fewer rows than the cap (PostgreSQL: 10, each costs a page read) and
    /// estimate deeper ones.
    pub deepest: Vec<ShardDepth>,
    /// Shards with a failure state (backing off, paused, quarantined), next
    /// attempt first.
    pub failing: Vec<FailingShard>,
    /// Dead letters: exact up to the cap, else at least the cap.
    pub dead_letters: Count,
}

/// What the backlog gauges show of one table, read at once
/// ([`StoreAdmin::read_backlog`]; one statement on PostgreSQL), its counts
/// capped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BacklogReading {
    /// Rows pending: exact up to the cap, above it estimated or at least
    /// the cap.
    pub pending: Count,
    /// When the oldest pending row was written (of the oldest `cap + 1` by
    /// id, when there are more); `None` when nothing is pending.
    pub oldest_date_added: Option<DateTime<Utc>>,
    /// Shards backing off after a failure (neither quarantined, paused nor
    /// parked), of the first `cap` shard states.
    pub failing_shards: u64,
    /// Shards parked on a payload version their receiver does not know
    /// ([`ShardState::is_parked`]), of the first `cap`.
    pub parked_shards: u64,
    /// Shards quarantined after a permanent error, of the first `cap`.
    pub quarantined_shards: u64,
    /// Shards parked by an operator's pause, of the first `cap`.
    pub paused_shards: u64,
    /// The table's upkeep (PostgreSQL).
    pub health: TableHealth,
    /// Dead letters of the table: exact up to the cap, else at least it.
    pub dead_letters: Count,
    /// Each scope with pending rows, in scope order.
    pub scopes: Vec<ScopeDepth>,
}

/// What the database says of an outbox table's upkeep (PostgreSQL; `None`
/// where a store cannot tell).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableHealth {
    /// Dead row versions waiting for vacuum (`pg_stat_user_tables`): a
    /// drain deletes every row it delivers, so a number that only grows
    /// means vacuum cannot keep up or is held back.
    pub dead_tuples: Option<u64>,
    /// How long the oldest open transaction of this database (another
    /// session's) has run: it holds back the `xmin` horizon, so vacuum
    /// cannot remove what the drain deleted since it began.
    pub oldest_transaction_age: Option<std::time::Duration>,
    /// What holds vacuum's horizon back the furthest (PostgreSQL): a
    /// session, a prepared transaction or a replication slot, named so
    /// that an operator can end it. `None` when nothing does.
    pub horizon: Option<HorizonHolder>,
}

/// What keeps vacuum from removing the rows the drain deleted: the oldest
/// snapshot or transaction id still needed, and who needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HorizonHolder {
    /// A session, a prepared transaction, or a replication slot.
    pub kind: HorizonHolderKind,
    /// The session's process id (`pg_terminate_backend(pid)` ends it), or
    /// the pid of the process using the slot.
    pub pid: Option<i32>,
    /// The session's `application_name` (its user when it set none), the
    /// prepared transaction's gid, or the slot's name.
    pub name: String,
    /// The session's user, or the prepared transaction's owner.
    pub user: Option<String>,
    /// The session's state (`idle in transaction` is the usual culprit),
    /// or whether the slot is `active` or `inactive`.
    pub state: Option<String>,
    /// How long its transaction has been open (or since it was prepared);
    /// `None` for a slot.
    pub age: Option<std::time::Duration>,
    /// How many transactions behind the present its horizon is: what
    /// vacuum cannot clean up until it goes.
    pub xid_age: u64,
}

/// The kind of a [`HorizonHolder`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HorizonHolderKind {
    /// A client session with an open transaction or snapshot.
    Session,
    /// A prepared (two-phase) transaction, waiting for its
    /// `COMMIT PREPARED` or `ROLLBACK PREPARED`.
    PreparedTransaction,
    /// A replication slot whose consumer lags or is gone.
    ReplicationSlot,
}

impl HorizonHolderKind {
    /// `session`, `prepared transaction` or `replication slot`.
    pub fn as_str(self) -> &'static str {
        match self {
            HorizonHolderKind::Session => "session",
            HorizonHolderKind::PreparedTransaction => "prepared transaction",
            HorizonHolderKind::ReplicationSlot => "replication slot",
        }
    }

    /// The kind named by [`as_str`](Self::as_str).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "session" => Some(HorizonHolderKind::Session),
            "prepared transaction" => Some(HorizonHolderKind::PreparedTransaction),
            "replication slot" => Some(HorizonHolderKind::ReplicationSlot),
            _ => None,
        }
    }
}

/// One scope's pending rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeDepth {
    /// The scope's stored value.
    pub scope: i32,
    /// Rows pending: exact from [`StoreAdmin::scope_depths`]; from
    /// [`StoreAdmin::read_backlog`] exact up to the cap, above it estimated
    /// or at least what was counted.
    pub depth: Count,
    /// When its oldest pending row was written (from
    /// [`StoreAdmin::read_backlog`] when the table holds more than the cap:
    /// exact if the scope has a row among the table's oldest `cap + 1`, else
    /// the `date_added` of one of its rows, so its age may be less).
    pub oldest_date_added: DateTime<Utc>,
}

/// Inspection and administration of an outbox store. The drain calls only
/// `controls` (a cached read) and `retry_now`; each is one read or one
/// transaction.
#[async_trait]
pub trait StoreAdmin: Send + Sync + 'static {
    /// Rows pending in `kind`, every one counted: for tests and small
    /// tables (the admin reads use [`snapshot`](Self::snapshot) and
    /// [`read_backlog`](Self::read_backlog), whose counts are capped).
    async fn pending_count(&self, kind: OutboxKind) -> Result<u64, StoreError>;

    /// The deepest pending shards first, at most `limit` (Sentry's
    /// `get_shard_depths_descending`): every row counted, depths exact.
    async fn shard_depths(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<ShardDepth>, StoreError>;

    /// Per scope with pending rows: how many, and when the oldest was
    /// written (the per-scope backlog gauges). The default reads every
    /// shard's depth; SQL stores answer with one `GROUP BY`.
    async fn scope_depths(&self, kind: OutboxKind) -> Result<Vec<ScopeDepth>, StoreError> {
        let mut scopes: Vec<ScopeDepth> = Vec::new();
        for shard in self.shard_depths(kind, usize::MAX).await? {
            match scopes.iter_mut().find(|s| s.scope == shard.shard.scope()) {
                Some(scope) => {
                    scope.depth = scope.depth + shard.depth;
                    scope.oldest_date_added = scope.oldest_date_added.min(shard.oldest_date_added);
                }
                None => scopes.push(ScopeDepth {
                    scope: shard.shard.scope(),
                    depth: shard.depth,
                    oldest_date_added: shard.oldest_date_added,
                }),
            }
        }
        scopes.sort_by_key(|s| s.scope);
        Ok(scopes)
    }

    /// How many dead letters `kind` holds, all counted. The default reads a
    /// snapshot without a cap.
    async fn dead_letter_count(&self, kind: OutboxKind) -> Result<u64, StoreError> {
        Ok(self.snapshot(kind, 1, u64::MAX).await?.dead_letters.value())
    }

    /// What the backlog gauges show of `kind` ([`BacklogReading`]), each
    /// count capped at `cap`: what [`DrainView::backlog`] and the worker's
    /// gauges read every interval, so its cost must not grow with the
    /// backlog. The default composes the other reads (exact counts, then
    /// capped); the PostgreSQL store answers with one statement whose cost
    /// is bounded by the cap.
    ///
    /// [`DrainView::backlog`]: crate::DrainView::backlog
    async fn read_backlog(&self, kind: OutboxKind, cap: u64) -> Result<BacklogReading, StoreError> {
        let pending = Count::up_to(self.pending_count(kind).await?, cap);
        let oldest_date_added = self.oldest_pending(kind).await?;
        let failing = self
            .failing_shards(kind, usize::try_from(cap).unwrap_or(usize::MAX))
            .await?;
        let count = |which: fn(&ShardState) -> bool| {
            failing.iter().filter(|shard| which(&shard.state)).count() as u64
        };
        let quarantined_shards = count(ShardState::is_quarantined);
        let paused_shards = count(ShardState::is_paused);
        let parked_shards = count(ShardState::is_parked);
        let health = self.table_health(kind).await?;
        let dead_letters = Count::up_to(self.dead_letter_count(kind).await?, cap);
        let mut scopes = self.scope_depths(kind).await?;
        for scope in &mut scopes {
            scope.depth = Count::up_to(scope.depth.value(), cap);
        }
        Ok(BacklogReading {
            pending,
            oldest_date_added,
            failing_shards: failing.len() as u64
                - quarantined_shards
                - paused_shards
                - parked_shards,
            parked_shards,
            quarantined_shards,
            paused_shards,
            health,
            dead_letters,
            scopes,
        })
    }

    /// When the oldest pending row of `kind` was written.
    async fn oldest_pending(&self, kind: OutboxKind) -> Result<Option<DateTime<Utc>>, StoreError>;

    /// The highest row id of `kind`, if any row is pending.
    async fn max_id(&self, kind: OutboxKind) -> Result<Option<i64>, StoreError>;

    /// Whether a row of `kind` is due at `now` in a shard that is neither
    /// claimed nor backing off: what a drain round would find.
    async fn has_due(&self, kind: OutboxKind, now: DateTime<Utc>) -> Result<bool, StoreError>;

    /// Shards that failed and have not succeeded since, next attempt first,
    /// at most `limit`.
    async fn failing_shards(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<FailingShard>, StoreError>;

    /// Shards parked on a payload version their receiver does not know
    /// ([`ShardState::is_parked`]: a producer was deployed ahead of it),
    /// next attempt first, at most `limit`: the failing shards that wait
    /// for a deploy rather than for a fix. The default reads every failing
    /// shard and keeps the parked ones; the SQL stores select them with one
    /// statement.
    async fn parked_shards(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<FailingShard>, StoreError> {
        let mut parked = self.failing_shards(kind, usize::MAX).await?;
        parked.retain(|shard| shard.state.is_parked());
        parked.truncate(limit);
        Ok(parked)
    }

    /// Dead-lettered rows of `kind`, oldest first, at most `limit`.
    async fn dead_letters(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<DeadLetterRow>, StoreError>;

    /// Moves dead-lettered rows back into the outbox (same ids, due at once),
    /// for another try after a fix. Returns how many were moved.
    async fn replay_dead_letters(&self, kind: OutboxKind, ids: &[i64]) -> Result<u64, StoreError>;

    /// Deletes the dead letters of `kind` with these ids, for good (an
    /// operator decided they are not worth delivering). Returns how many
    /// were deleted.
    async fn discard_dead_letters(&self, kind: OutboxKind, ids: &[i64]) -> Result<u64, StoreError>;

    /// Makes `shards` due at once: their backoff (a quarantine included)
    /// ends now and their rows are due. Their attempts and last delay stay,
    /// so a shard that fails again backs off further; a success forgets
    /// them. For an operator after a fix, and for a receiver that is back.
    ///
    /// A shard whose bucket is leased at `now` is left as it is (its holder
    /// may be about to write its state): ask again later. Safe against
    /// concurrent claims: a claim that read the shard's state before this
    /// call cannot lease its bucket after it. Returns the shards released.
    async fn retry_now(
        &self,
        shards: &[ShardKey],
        now: DateTime<Utc>,
    ) -> Result<Vec<ShardKey>, StoreError>;

    /// The pending rows, the deepest and the failing shards (up to `limit`
    /// each) and the dead letters of `kind`, read in one transaction (the
    /// parts agree with each other), every count capped at `cap`: exact up
    /// to it, above it estimated or at least `cap` (see [`AdminSnapshot`]),
    /// so that its cost does not grow with the backlog.
    async fn snapshot(
        &self,
        kind: OutboxKind,
        limit: usize,
        cap: u64,
    ) -> Result<AdminSnapshot, StoreError>;

    /// Dead tuples of `kind`'s table and the age of the oldest open
    /// transaction (see [`TableHealth`]).
    async fn table_health(&self, kind: OutboxKind) -> Result<TableHealth, StoreError>;

    /// Every runtime control (see [`crate::control`]), shard controls and
    /// scope controls alike.
    async fn controls(&self) -> Result<Vec<RuntimeControl>, StoreError>;

    /// Sets `control`, replacing the control of the same target if any.
    async fn set_control(&self, control: &RuntimeControl) -> Result<(), StoreError>;

    /// Removes the control of `target`; returns whether there was one.
    async fn clear_control(&self, target: &ControlTarget) -> Result<bool, StoreError>;

    /// Records an operator's action in the audit log (see
    /// [`crate::audit`]) and removes the records written before
    /// `keep_after`.
    async fn record_audit(
        &self,
        entry: &AuditEntry,
        keep_after: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// The newest `limit` audit records, newest first.
    async fn audit_log(&self, limit: usize) -> Result<Vec<AuditRecord>, StoreError>;

    /// The oldest pending rows of `shard`, at most `limit`, in id order:
    /// its head message first.
    async fn shard_head(
        &self,
        shard: &ShardKey,
        limit: usize,
    ) -> Result<Vec<StoredRow>, StoreError>;

    /// Moves the rows `ids` of `shard` to the dead letters with `error`
    /// (whatever the scope's policy; a replay brings them back) and makes
    /// the shard's other rows due at once, its failure state forgotten, so
    /// that the rest of it flows. `None`, changing nothing, while a worker
    /// holds the shard's bucket; else how many rows moved.
    async fn set_aside(
        &self,
        shard: &ShardKey,
        ids: &[i64],
        error: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<u64>, StoreError>;

    /// Records a worker's samples (see [`crate::history`]), in one
    /// statement where the store can, and removes those taken before
    /// `keep_after`. A sample of the same time, table, scope and owner as
    /// one recorded is ignored.
    async fn record_history(
        &self,
        samples: &[Sample],
        keep_after: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// The samples of `kind` taken since `since` (every owner, every
    /// scope), oldest first.
    async fn history(
        &self,
        kind: OutboxKind,
        since: DateTime<Utc>,
    ) -> Result<Vec<Sample>, StoreError>;
}
