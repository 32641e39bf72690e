//! The storage interface the drain engine is written against.
//!
//! A [`Store`] owns the outbox tables and the shard claims. The engine asks it
//! to claim due shards in batches, read a batch of rows per claimed shard,
//! and commit what was delivered: delete the delivered rows, renew or release
//! the claims, reschedule failed shards. Every write is *fenced*: it takes
//! effect only for shards whose claim still carries the caller's token and has
//! not expired, so a worker whose lease ran out can no longer delete rows.
//!
//! Handlers run between [`Store::read_rows`] and [`Store::commit`], outside any
//! transaction on the outbox tables.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::message::StoredRow;
use crate::shard::{OutboxKind, ShardKey};

/// A boxed error from the database driver.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A claim on a shard: while `lease_until` has not passed, no other worker
/// takes the shard, and writes carrying `token` are accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardClaim {
    /// The claimed shard.
    pub shard: ShardKey,
    /// The fencing token of the claim.
    pub token: i64,
    /// When the claim expires unless renewed.
    pub lease_until: DateTime<Utc>,
    /// The delay of the shard's last failure, if it failed since its last
    /// success (the backoff doubles from it).
    pub last_backoff: Option<Duration>,
    /// Failed attempts since the shard's last success.
    pub attempts: u32,
}

/// What a claim call asks for.
#[derive(Clone, Debug)]
pub struct ClaimRequest {
    /// The outbox table.
    pub kind: OutboxKind,
    /// The current time.
    pub now: DateTime<Utc>,
    /// The lease end of the claims made.
    pub lease_until: DateTime<Utc>,
    /// The fencing token of the claims made; random per claim call.
    pub token: i64,
    /// Who claims, for operators (host, process, worker).
    pub owner: String,
    /// At most this many shards.
    pub limit: usize,
    /// Only rows with ids at most this one count as due, if set.
    pub up_to_id: Option<i64>,
}

/// A shard to read, up to an id (a synchronous flush reads only what its
/// request wrote).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardRead {
    /// The shard.
    pub shard: ShardKey,
    /// Read rows with ids at most this one, if set.
    pub up_to_id: Option<i64>,
}

/// How a claimed shard ends a round.
#[derive(Clone, Debug, PartialEq)]
pub enum ShardEnd {
    /// More rows may be waiting: keep the claim and renew its lease.
    Continue,
    /// Done for now: drop the claim and forget the shard's backoff.
    Release,
    /// A delivery failed: reschedule every row of the shard at `retry_at` and
    /// keep others off the shard until then.
    Backoff {
        /// The next attempt.
        retry_at: DateTime<Utc>,
        /// The delay that led to `retry_at`.
        delay: Duration,
        /// What failed, for operators.
        error: String,
        /// Failed attempts since the shard's last success, this one included.
        attempts: u32,
    },
}

/// Rows moved to the dead-letter table instead of being retried.
#[derive(Clone, Debug, PartialEq)]
pub struct DeadLetter {
    /// The rows (one coalescing group).
    pub ids: Vec<i64>,
    /// Why they failed.
    pub error: String,
}

/// The outcome of one claimed shard in a round.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardCommit {
    /// The shard.
    pub shard: ShardKey,
    /// Rows to delete (delivered or culled).
    pub delete_ids: Vec<i64>,
    /// Rows to move to the dead-letter table (their scope's policy said so).
    pub dead_letters: Vec<DeadLetter>,
    /// What happens to the claim.
    pub end: ShardEnd,
}

/// Everything a round commits, in one transaction.
#[derive(Clone, Debug)]
pub struct CommitBatch {
    /// The outbox table.
    pub kind: OutboxKind,
    /// The fencing token of the claims.
    pub token: i64,
    /// The current time: claims whose lease has passed are lost.
    pub now: DateTime<Utc>,
    /// The new lease end of claims that continue.
    pub renew_until: DateTime<Utc>,
    /// Rows are deleted in statements of at most this many ids.
    pub delete_chunk: usize,
    /// One entry per claimed shard.
    pub shards: Vec<ShardCommit>,
}

/// What a commit did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitOutcome {
    /// Rows deleted (delivered or culled).
    pub deleted: u64,
    /// Rows moved to the dead-letter table.
    pub dead_lettered: u64,
    /// Shards whose claim had expired or been taken: nothing was written for them.
    pub lost: Vec<ShardKey>,
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

/// A pending shard, for inspection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardDepth {
    /// The shard.
    pub shard: ShardKey,
    /// Rows pending.
    pub depth: u64,
    /// When its oldest pending row was written.
    pub oldest_date_added: DateTime<Utc>,
    /// The earliest `scheduled_for` of its rows.
    pub next_scheduled_for: DateTime<Utc>,
}

/// A failure of the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database refused or could not run a statement (connection lost,
    /// timeout, constraint). Rows are untouched by a failed statement; the
    /// drain retries on its next round.
    #[error("outbox store could not {operation}: {source}")]
    Database {
        /// What the store was doing.
        operation: &'static str,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
    /// A stored value could not be decoded.
    #[error("outbox store read a malformed {what}: {detail}")]
    Malformed {
        /// The column or value.
        what: &'static str,
        /// What was wrong.
        detail: String,
    },
}

impl StoreError {
    /// Wraps a driver error.
    pub fn database(operation: &'static str, source: impl Into<BoxError>) -> Self {
        StoreError::Database {
            operation,
            source: source.into(),
        }
    }
}

/// Storage for outbox rows and shard claims.
///
/// Implementations: `MemoryStore` in this crate (feature `test-utils`), and
/// the PostgreSQL and SQLite stores of `outbox-seaorm`.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Claims up to `request.limit` due shards (rows with `scheduled_for <=
    /// now`) that nobody holds, oldest first. Safe to call from many workers
    /// and processes at once: a shard is granted to one of them.
    async fn claim_due(&self, request: &ClaimRequest) -> Result<Vec<ShardClaim>, StoreError>;

    /// Claims one shard now if nobody holds it, whether or not it is due and
    /// even if it is backing off (the synchronous flush). `None` when a live
    /// claim holds it.
    async fn claim_shard(
        &self,
        request: &ClaimRequest,
        shard: &ShardKey,
    ) -> Result<Option<ShardClaim>, StoreError>;

    /// Reads up to `limit` rows of each shard, in id order.
    async fn read_rows(
        &self,
        kind: OutboxKind,
        shards: &[ShardRead],
        limit: usize,
    ) -> Result<Vec<StoredRow>, StoreError>;

    /// Applies a round atomically, fenced by `batch.token`.
    async fn commit(&self, batch: &CommitBatch) -> Result<CommitOutcome, StoreError>;

    /// Rows pending in `kind`.
    async fn pending_count(&self, kind: OutboxKind) -> Result<u64, StoreError>;

    /// The deepest pending shards first, at most `limit` (Sentry's
    /// `get_shard_depths_descending`).
    async fn shard_depths(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<ShardDepth>, StoreError>;

    /// When the oldest pending row of `kind` was written.
    async fn oldest_pending(&self, kind: OutboxKind) -> Result<Option<DateTime<Utc>>, StoreError>;

    /// Whether any row of `kind` is due at `now` in a shard nobody holds.
    async fn has_due(&self, kind: OutboxKind, now: DateTime<Utc>) -> Result<bool, StoreError>;

    /// Ends the live claims of `token` now, as if their lease had run out:
    /// other workers may claim those shards at once, and `token` can no longer
    /// commit. Backoff state and failure counts stay. For claims whose holder
    /// was cancelled (see [`Drainer::release_abandoned`](crate::Drainer::release_abandoned)).
    /// Returns how many claims it ended.
    async fn expire_claims(
        &self,
        kind: OutboxKind,
        token: i64,
        now: DateTime<Utc>,
    ) -> Result<u64, StoreError>;

    /// The highest row id of `kind`, if any row is pending.
    async fn max_id(&self, kind: OutboxKind) -> Result<Option<i64>, StoreError>;

    /// Dead-lettered rows of `kind`, oldest first, at most `limit`.
    async fn dead_letters(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<DeadLetterRow>, StoreError>;

    /// Moves dead-lettered rows back into the outbox (same ids, due at once),
    /// for another try after a fix. Returns how many were moved.
    async fn replay_dead_letters(&self, kind: OutboxKind, ids: &[i64]) -> Result<u64, StoreError>;
}
