//! The drain engine: claim shards, deliver coalesced messages in order, commit.
//!
//! A [`Drainer`] pairs a [`Store`](crate::store::Store) with [`Receivers`](crate::Receivers).
//! It has two entry points:
//!
//! - The *synchronous flush* delivers what a transaction wrote right after it
//!   commits, and reports the first failure to the caller:
//!   [`Drainer::prepare_flush`] claims the shards inside the transaction,
//!   before its `COMMIT`, and leaves the delete and release to a background
//!   completer (nothing sent after the commit); [`Drainer::drain_shard`]
//!   claims one shard after the commit (see `flush.rs`).
//! - [`Drainer::drain_due`] is one *background round*: claim a batch of due
//!   shards, deliver them concurrently (each shard in order), and commit.
//!
//! # One round
//!
//! 1. Claim: lease free buckets (at most half of them) that hold due rows,
//!    chosen in a window of due rows taken from the oldest or the newest end
//!    (the planner looks at both, so that neither a backlog nor a deep
//!    shard delays the rest), and read each leased shard from its oldest pending
//!    row, a deep one in batches, in one statement on PostgreSQL. A lease
//!    lasts seconds and carries a random token that fences the claim's
//!    commits, and a [`FencingToken`](crate::FencingToken) that only grows,
//!    which every message carries to its receiver; nobody else takes any
//!    shard of a leased bucket until it ends.
//! 2. Fold each shard's rows into coalescing groups ordered by lowest id and
//!    deliver each shard's groups in order, shards concurrently, each in its
//!    own task, outside any transaction. The first failure stops its shard.
//!    A shard that backs off after an earlier failure is not delivered.
//!    Shards with a message for a batch receiver
//!    ([`Receivers::on_batch`](crate::Receivers::on_batch)) go in *waves*
//!    instead (`wave.rs`): each wave calls a batch handler once with the
//!    next message of every such shard, at most one per shard, and records
//!    every result before the next, so a shard still has one call out at a
//!    time.
//! 3. Commit what finished in one transaction: delete delivered rows, release
//!    the buckets, reschedule failed shards with doubling backoff. Shards
//!    still running after `commit_interval` keep their buckets while the rest
//!    commit, so one slow receiver holds one bucket, not the round's.
//! 4. While receivers run, renew the leases every third of the lease. A round
//!    that cannot renew cancels its receivers before the lease ends, and a
//!    commit under an expired lease writes nothing (fencing), so two workers
//!    never deliver one shard at the same time. Before each receiver call a
//!    worker checks its lease by its own clock and calls nothing once it
//!    ended (a process paused past its lease resumes there); what a pause
//!    between that check and the call lets through, the receiver refuses by
//!    the message's fencing token.
//!
//! How many rows a round's window holds follows the receivers' speed (about
//! what they deliver in `round_duration` at the configured concurrency) and
//! what the last claims found (see `planner.rs`).
//!
//! # Example
//!
//! ```
//! outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 } }
//! use outbox_core::{Drainer, MemoryStore, Message, OutboxKind, Receivers, ShardKey};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let shard = ShardKey::region(OutboxScope::OrgScope, 42);
//! for name in ["a", "b", "c"] {
//!     store.write(&shard, OutboxCategory::OrgUpdate, 42, Some(serde_json::json!({ "name": name })));
//! }
//! #[derive(serde::Deserialize)]
//! struct Org { name: String }
//! let receivers = Receivers::new().on(OutboxCategory::OrgUpdate, |msg: Message<OutboxCategory>| async move {
//!     let org: Org = msg.payload_as()?; // parsed from the stored JSON, when asked
//!     assert_eq!(org.name, "c"); // coalesced: newest payload only
//!     Ok::<_, outbox_core::HandlerError>(())
//! });
//! let drainer = Drainer::new(store.clone(), receivers);
//! let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
//! assert_eq!((report.deliveries, report.rows_deleted), (1, 3));
//! # });
//! ```

mod abandoned;
mod builder;
mod call;
mod claim;
mod complete;
mod config;
mod deliver;
mod deprecated;
mod drainer;
mod engine;
mod flush;
mod head;
mod held;
mod lease;
pub(crate) mod observe;
mod operator;
mod pace;
mod planner;
mod recovery;
mod report;
mod round;
mod span;
mod tally;
mod view;
mod wave;

pub use builder::DrainerBuilder;
pub use config::{
    DrainConfig, DEFAULT_BATCH_SIZE, DEFAULT_COMMIT_INTERVAL, DEFAULT_CONCURRENCY,
    DEFAULT_CONTROLS_REFRESH, DEFAULT_COUNT_CAP, DEFAULT_DELIVERY_TIMEOUT, DEFAULT_LEASE,
    DEFAULT_ROUND_DURATION, DEFAULT_SYNC_WAIT,
};
#[allow(deprecated)]
#[doc(hidden)]
pub use deprecated::{DEFAULT_DELETE_CHUNK, DEFAULT_MAX_ROWS_PER_CLAIM, DEFAULT_SHARDS_PER_CLAIM};
pub use drainer::Drainer;
pub use engine::DeadLetterPolicy;
pub use flush::{FlushOutcome, PreparedFlush};
pub use head::HeadMessage;
pub use operator::DrainOperator;
pub use report::{DeliveryError, DrainReport, FlushError, ShardFailure};
pub use view::{Backlog, DrainView, ScopeBacklog};
