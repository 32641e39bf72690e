//! The storage interface the drain engine is written against, split along
//! how it is used.
//!
//! - [`DrainStore`] is the hot path, and all the drain needs: claim due rows
//!   (or one shard, for a synchronous flush), keep claims alive while
//!   handlers run, commit what was delivered, and end the claims of a round
//!   that was cancelled.
//! - [`StoreAdmin`] is everything else: counts, depths, failing shards, dead
//!   letters. Operators, tests and admin pages use it; the drain never does.
//!
//! # Claims
//!
//! A worker never holds a transaction open while handlers run (rule 7).
//! Instead it *claims* the shards it works on: a lease with a random fencing
//! token, in a store that every process shares. The unit of a claim is a
//! bucket of shards ([`ShardKey::bucket`](crate::ShardKey::bucket)): one lease
//! covers every shard hashed into it, so a round that delivers thousands of
//! one-message shards takes a few hundred leases, not thousands. While a
//! lease is live, no other worker, in any process, takes any shard of its
//! bucket (rule 3).
//!
//! Leases are short (3 s by default) and renewed every third of that while
//! deliveries run, so a crashed worker's shards are free again within one
//! lease. Every write of a commit is *fenced*: it takes effect only for
//! buckets whose lease still carries the caller's token and has not expired,
//! so a worker whose lease ran out can no longer delete rows (rule 7).
//!
//! # Backoff
//!
//! A shard whose delivery failed gets a [`ShardState`]: its failed attempts,
//! its last delay and error, and when it may be tried again. Its rows are
//! rescheduled to that time, and a claim hands the state back with the shard,
//! so that the engine can leave a backing-off shard alone (rule 5) however it
//! reaches it: a background round, or a synchronous flush.
//!
//! # Rows and their times
//!
//! A store reads rows as [`StoredRow`]s, and writes three `scheduled_for`
//! times that are not real ones: [`due_at_once`] (a new row, or one made
//! due again), [`paused_until`] (an operator's pause) and
//! [`quarantined_until`] (a permanent error).

mod admin;
mod count;
mod drain;
mod error;

pub use admin::{
    AdminSnapshot, BacklogReading, DeadLetterRow, FailingShard, HorizonHolder, HorizonHolderKind,
    ScopeDepth, ShardDepth, StoreAdmin, TableHealth,
};
pub use count::Count;
pub use drain::{
    ClaimBeforeCommit, ClaimOrder, ClaimRequest, ClaimedShard, CommitBatch, CommitOutcome,
    DeadLetter, DrainStore, DueClaim, ShardClaim, ShardCommit, ShardEnd, ShardState, ShardStatus,
};
pub use error::{BoxError, StoreError};

pub use crate::message::StoredRow;
pub use crate::schedule::{due_at_once, paused_until, quarantined_until};

/// A store the drain can run on and operators can inspect: both traits.
pub trait Store: DrainStore + StoreAdmin {}

impl<T: DrainStore + StoreAdmin> Store for T {}
