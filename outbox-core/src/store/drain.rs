//! The hot path: claim, renew, commit, expire.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::error::StoreError;
use crate::fence_token::FencingToken;
use crate::message::StoredRow;
use crate::shard::{OutboxKind, ShardKey};

/// What a claim asks for.
#[derive(Clone, Debug)]
pub struct ClaimRequest {
    /// The outbox table.
    pub kind: OutboxKind,
    /// The current time: leases that end at or before it are free.
    pub now: DateTime<Utc>,
    /// The end of the leases taken.
    pub lease_until: DateTime<Utc>,
    /// The fencing token of the leases taken; random per claim.
    pub token: i64,
    /// Who claims, for operators (process and a random suffix).
    pub owner: String,
    /// The claim's window: [`claim_due`](DrainStore::claim_due) chooses its
    /// shards among this many due rows of free buckets (scanning at most
    /// [`scan_limit`](Self::scan_limit) of them), and reads at most as many rows of each as it had in
    /// the window, beyond which only `beyond` is read. The other claims
    /// return at most this many rows per shard.
    pub rows: usize,
    /// Only rows with ids at most this one, if set.
    pub up_to_id: Option<i64>,
    /// Which end of the due rows a background claim looks at first
    /// ([`claim_due`](DrainStore::claim_due) only).
    pub order: ClaimOrder,
    /// When the window was full, rows read beyond it in all: the shards that
    /// had more than one row in it (deep shards, whose coalescing groups are
    /// then delivered once by this claim rather than split with the next)
    /// share `rows + beyond`, each reading as far as its share (and at least
    /// its rows in the window); 0 reads none beyond the window
    /// ([`claim_due`](DrainStore::claim_due) only).
    pub beyond: usize,
    /// At most this many rows of one shard, however deep: a deeper shard is
    /// delivered in batches of it, so that its round stays short and the
    /// other shards' claims need not wait for it for long
    /// ([`claim_due`](DrainStore::claim_due) only).
    pub shard_rows: usize,
    /// Due rows that this drainer's own background rounds hold while they
    /// deliver (their buckets leased, their rows not deleted yet). A claim
    /// from the oldest end beside them meets them among the first rows it
    /// scans, and scans this many more (see [`scan_limit`](Self::scan_limit));
    /// 0 for any other claim ([`claim_due`](DrainStore::claim_due) only).
    pub held_rows: usize,
}

impl ClaimRequest {
    /// How many due rows a background claim scans at most to fill its
    /// window: a quarter more than the window, whatever is held elsewhere,
    /// so that a deep shard whose bucket is held costs a claim a bounded
    /// scan; from the oldest end, past the rows this drainer's own rounds
    /// hold too ([`held_rows`](Self::held_rows)).
    pub fn scan_limit(&self) -> usize {
        let held = match self.order {
            ClaimOrder::Oldest => self.held_rows,
            ClaimOrder::Newest => 0,
        };
        self.rows.saturating_add(self.rows / 4).saturating_add(held)
    }
}

/// Which end of the due rows a background claim starts from.
///
/// The oldest first serves rows in the order they became due; the newest
/// first finds what was just written at once, however long the backlog
/// before it, or held elsewhere. The drain looks at both (see its planner),
/// so that neither a backlog nor a deep shard being delivered delays the
/// rest for long. Either way a claimed shard is read from its oldest pending row:
/// the order only picks the shards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClaimOrder {
    /// The oldest due rows first.
    #[default]
    Oldest,
    /// The newest due rows first.
    Newest,
}

/// What a background claim leased, and what it saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DueClaim {
    /// The claimed shards with their rows, in the order the window met them.
    pub shards: Vec<ClaimedShard>,
    /// Due rows of free buckets the claim chose among (at most the request's
    /// `rows`).
    pub window: usize,
    /// Due rows it scanned to find them (at most the request's
    /// [`scan_limit`](ClaimRequest::scan_limit)): far more than `window`
    /// means most of them sat in buckets held elsewhere.
    pub scanned: usize,
}

impl DueClaim {
    /// Whether the claim's scan was mostly rows of held buckets: it scanned
    /// as far as it may and found less than half a window.
    pub fn is_blocked(&self, request: &ClaimRequest) -> bool {
        self.window.saturating_mul(2) < request.rows && self.scanned >= request.scan_limit()
    }

    /// Whether due rows may be left that this claim saw but did not take:
    /// its window was full, or a shard was read only as far as it may be.
    pub fn may_have_more(&self, request: &ClaimRequest) -> bool {
        self.window >= request.rows
            || self
                .shards
                .iter()
                .any(|shard| shard.rows.len() >= request.shard_rows)
    }

    /// Rows returned, over every shard.
    pub fn rows(&self) -> usize {
        self.shards.iter().map(|shard| shard.rows.len()).sum()
    }
}

/// A backing-off shard: what its failures left behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardState {
    /// Failed attempts since the shard's last success.
    pub attempts: u32,
    /// The delay of the last failure (the next one doubles it).
    pub last_backoff: Option<Duration>,
    /// When the shard may be tried again.
    pub retry_at: DateTime<Utc>,
    /// What failed last, for operators.
    pub last_error: Option<String>,
    /// When it failed last.
    pub failed_at: DateTime<Utc>,
}

impl ShardState {
    /// Whether the shard is quarantined after a permanent error: it waits
    /// for an operator (`StoreAdmin::retry_now`), not for a time.
    pub fn is_quarantined(&self) -> bool {
        self.retry_at >= crate::schedule::quarantined_until()
    }

    /// Whether the shard is parked by an operator's pause (see
    /// [`crate::control`]).
    pub fn is_paused(&self) -> bool {
        self.retry_at >= crate::schedule::paused_until() && !self.is_quarantined()
    }

    /// Whether the shard is parked on a payload version its receiver does
    /// not know (see [`UnknownVersion`](crate::UnknownVersion)): it is
    /// tried again at `retry_at`, without backoff.
    pub fn is_parked(&self) -> bool {
        !self.is_quarantined()
            && !self.is_paused()
            && self
                .last_error
                .as_deref()
                .is_some_and(crate::registry::contract::is_parked_error)
    }

    /// What the shard waits for, as views show it.
    pub fn status(&self) -> ShardStatus {
        if self.is_quarantined() {
            ShardStatus::Quarantined
        } else if self.is_paused() {
            ShardStatus::Paused
        } else if self.is_parked() {
            ShardStatus::Parked
        } else {
            ShardStatus::BackingOff
        }
    }

    /// When it is tried again: a real time while it backs off or is
    /// parked, `None` while it waits for an operator (paused or
    /// quarantined).
    pub fn next_attempt(&self) -> Option<DateTime<Utc>> {
        matches!(self.status(), ShardStatus::BackingOff | ShardStatus::Parked)
            .then_some(self.retry_at)
    }
}

/// What a shard with a failure state waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShardStatus {
    /// A time: it failed and is tried again at its next attempt.
    BackingOff,
    /// An operator's resume (a runtime control parks it).
    Paused,
    /// An operator: a receiver answered with a permanent error.
    Quarantined,
    /// A receiver that knows a newer payload version: a producer was
    /// deployed ahead of this one; tried again every park interval.
    Parked,
}

impl ShardStatus {
    /// `backing_off`, `paused`, `quarantined` or `parked`.
    pub fn as_str(self) -> &'static str {
        match self {
            ShardStatus::BackingOff => "backing_off",
            ShardStatus::Paused => "paused",
            ShardStatus::Quarantined => "quarantined",
            ShardStatus::Parked => "parked",
        }
    }
}

/// One shard of a claim, with its rows.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimedShard {
    /// The shard.
    pub shard: ShardKey,
    /// A prefix of the shard's pending rows, in id order: everything the
    /// worker may deliver now. Rows beyond it wait for a later claim.
    pub rows: Vec<StoredRow>,
    /// Set when the shard failed and has not succeeded since. A shard whose
    /// `retry_at` is still ahead must not be delivered; its rows (new ones
    /// written meanwhile) are rescheduled instead ([`ShardEnd::Wait`]).
    pub state: Option<ShardState>,
    /// The fencing token of the claim that leased the shard: higher than
    /// that of any earlier claim of it (see [`crate::fence`]).
    pub fence: FencingToken,
}

/// What a synchronous claim of one shard found.
#[derive(Clone, Debug, PartialEq)]
pub enum ShardClaim {
    /// The shard's bucket is now leased to the caller.
    Claimed(ClaimedShard),
    /// Another worker holds the shard's bucket; nothing was taken.
    Held,
    /// The shard backs off after a failure until `retry_at`; nothing was
    /// taken (rule 5: a failing shard waits, whoever asks).
    BackingOff(ShardState),
}

/// How a claimed shard ends.
#[derive(Clone, Debug, PartialEq)]
pub enum ShardEnd {
    /// Delivered (or nothing to do); the shard had no backoff state.
    Done,
    /// Delivered after it had failed before: forget its backoff state and
    /// make its remaining rows due at once again.
    Recovered,
    /// A delivery failed: reschedule every row of the shard at `retry_at` and
    /// record why.
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
    /// The shard was backing off: nothing was delivered; rows due before
    /// `retry_at` (written since the failure) are rescheduled to it.
    Wait {
        /// The shard's next attempt.
        retry_at: DateTime<Utc>,
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

/// The outcome of one claimed shard.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardCommit {
    /// The shard.
    pub shard: ShardKey,
    /// Rows to delete (delivered or culled).
    pub delete_ids: Vec<i64>,
    /// Rows to move to the dead-letter table (their scope's policy said so).
    pub dead_letters: Vec<DeadLetter>,
    /// What happens to the shard's schedule and backoff state.
    pub end: ShardEnd,
}

/// What a commit applies, atomically and fenced by `token`.
#[derive(Clone, Debug)]
pub struct CommitBatch {
    /// The outbox table.
    pub kind: OutboxKind,
    /// The fencing token of the claim.
    pub token: i64,
    /// The current time: leases that ended at or before it are lost.
    pub now: DateTime<Utc>,
    /// Shards whose work is done. Their buckets are released, unless a shard
    /// of `in_flight` shares one.
    pub shards: Vec<ShardCommit>,
    /// Shards of the same claim still being delivered: their buckets stay
    /// leased, until `renew_until`.
    pub in_flight: Vec<ShardKey>,
    /// The new end of the leases kept for `in_flight`.
    pub renew_until: DateTime<Utc>,
}

/// What a commit did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitOutcome {
    /// Rows deleted (delivered or culled).
    pub deleted: u64,
    /// Rows moved to the dead-letter table.
    pub dead_lettered: u64,
    /// Shards whose lease had expired or been taken: nothing was written for
    /// them, and their rows are delivered again by the next owner.
    pub lost: Vec<ShardKey>,
}

/// The hot path of the drain: what a worker needs, and nothing else.
///
/// Implementations: `MemoryStore` in this crate, and the PostgreSQL and
/// SQLite stores of `outbox-seaorm`. All of them pass the conformance suite
/// (`outbox_testing::conformance`, in the `outbox-testing` crate).
#[async_trait]
pub trait DrainStore: Send + Sync + 'static {
    /// Leases free buckets (at most
    /// [`MAX_BUCKETS_PER_CLAIM`](crate::shard::MAX_BUCKETS_PER_CLAIM)) that hold due
    /// rows (`scheduled_for <= now`), chosen in a window of `request.rows`
    /// due rows of free buckets from the end `request.order` says, and
    /// returns the rows of their shards that were in the window, shards in
    /// the order the window met them. Safe from many workers and processes
    /// at once: a bucket is leased to one of them, and one locked by an open
    /// transaction (a request's claim before its commit) is passed over,
    /// never waited for. Returns no shard when nothing is due in a free
    /// bucket.
    ///
    /// Each shard's rows are a prefix of its pending rows in id order (as
    /// many as it had in the window, and when the window was full and it had
    /// more than one there, its share of `request.rows + request.beyond`; at
    /// most `request.shard_rows`), read after
    /// the lease was taken: never a row that the previous holder of the
    /// bucket already deleted. A shard that backs off comes with its state,
    /// and its rows only once it may be tried again.
    async fn claim_due(&self, request: &ClaimRequest) -> Result<DueClaim, StoreError>;

    /// Leases the bucket of `shard` now, whether or not the shard is due, and
    /// returns up to `request.rows` of its rows (up to `request.up_to_id`):
    /// the synchronous flush after a commit. Leaves everything as it was when
    /// another worker holds the bucket, or when the shard is backing off.
    async fn claim_shard(
        &self,
        request: &ClaimRequest,
        shard: &ShardKey,
    ) -> Result<ShardClaim, StoreError>;

    /// Extends every live lease of `token` to `until`. Returns how many it
    /// extended: none when the leases expired or were ended meanwhile, and
    /// then the caller must stop delivering.
    async fn renew(
        &self,
        kind: OutboxKind,
        token: i64,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<u64, StoreError>;

    /// Applies `batch` atomically, fenced by its token: deletes, dead
    /// letters, backoff state and schedules of the shards whose lease is
    /// still live; releases the buckets of `shards` that no shard of
    /// `in_flight` needs; renews those of `in_flight`. Touches no other
    /// bucket: the engine lists every shard of a claim in its last commit,
    /// so that every bucket the claim leased is released. Shards whose lease is gone are listed in
    /// [`CommitOutcome::lost`] and left untouched.
    ///
    /// A commit need not be durable when it returns: one lost in a crash only
    /// means a delivery made again (rule 6, at least once).
    async fn commit(&self, batch: &CommitBatch) -> Result<CommitOutcome, StoreError>;

    /// Ends the live leases of `token` now, as if they had run out: other
    /// workers may take those buckets at once, and `token` can no longer
    /// commit. For claims whose holder was cancelled (see
    /// [`Drainer::release_abandoned`](crate::Drainer::release_abandoned)).
    /// Returns how many it ended.
    async fn expire_claims(
        &self,
        kind: OutboxKind,
        token: i64,
        now: DateTime<Utc>,
    ) -> Result<u64, StoreError>;

    /// Applies the commits of several finished synchronous flushes at once,
    /// each fenced by its own token: the common end of a flush (every shard
    /// [`ShardEnd::Done`], no dead letter, nothing in flight), batched by the
    /// drain's completer so that a response never waits for it. Returns one
    /// outcome per batch, in order. A store that can do it in one statement
    /// (PostgreSQL) should; the default commits one batch after the other.
    async fn complete(&self, batches: &[CommitBatch]) -> Result<Vec<CommitOutcome>, StoreError> {
        let mut outcomes = Vec::with_capacity(batches.len());
        for batch in batches {
            outcomes.push(self.commit(batch).await?);
        }
        Ok(outcomes)
    }
}

/// A transaction of the caller's that wrote outbox rows, and can claim their
/// shards before it commits: the synchronous flush's claim (see
/// [`Drainer::prepare_flush`](crate::Drainer::prepare_flush)).
///
/// The claim runs inside the transaction, in one statement on PostgreSQL, so
/// that the commit makes the rows and their claim visible together, and a
/// rollback takes both back. It never waits: a bucket that a live lease
/// holds, or that another open transaction is claiming, is reported
/// [`ShardClaim::Held`]. (Run on a connection outside any transaction,
/// after the writer committed, it is the same claim, visible at once.)
#[async_trait]
pub trait ClaimBeforeCommit: Send + Sync {
    /// Leases, as of the caller's commit, the buckets of `shards` (all of
    /// `request.kind`), each shard given with the highest id the transaction
    /// wrote in it, and returns for each, in order, what was found: its rows
    /// up to that id (at most `request.rows`, in id order, the
    /// transaction's own included), [`ShardClaim::Held`], or
    /// [`ShardClaim::BackingOff`] (no lease is taken for a shard that backs
    /// off).
    async fn claim_before_commit(
        &self,
        request: &ClaimRequest,
        shards: &[(ShardKey, i64)],
    ) -> Result<Vec<ShardClaim>, StoreError>;
}

impl CommitBatch {
    /// Whether this is the common end of a round: every shard delivered
    /// without a failure, nothing dead-lettered, nothing still in flight.
    pub fn is_finished(&self) -> bool {
        self.in_flight.is_empty()
            && self
                .shards
                .iter()
                .all(|shard| shard.end == ShardEnd::Done && shard.dead_letters.is_empty())
    }
}
