//! The drain engine: claim shards, deliver coalesced messages in order, commit.
//!
//! A [`Drainer`] pairs a [`Store`](crate::Store) with [`Receivers`](crate::Receivers).
//! It has two entry points:
//!
//! - [`Drainer::drain_shard`] is the *synchronous flush*: after a transaction that
//!   wrote rows commits, deliver one shard up to the highest id it wrote, now,
//!   and report the first failure to the caller.
//! - [`Drainer::drain_due`] is one *background round*: claim a batch of due
//!   shards, deliver them concurrently (each shard in order), and commit.
//!
//! # One round
//!
//! 1. Claim up to `shards_per_claim` shards in one statement. A claim is a lease
//!    with a random fencing token; nobody else takes the shard until it expires.
//! 2. Read up to `batch_size` rows of every claimed shard in one query, and fold
//!    each shard's rows into coalescing groups ordered by lowest id.
//! 3. Deliver each shard's groups in order, shards concurrently, outside any
//!    transaction. The first failure stops its shard.
//! 4. Commit in one transaction: delete delivered rows (in bounded chunks),
//!    release finished shards, renew those with more rows, and reschedule failed
//!    shards with doubling backoff. Every write is fenced by the claim token, so
//!    a worker whose lease expired deletes nothing.
//!
//! A delivery is never started unless the lease covers its whole timeout, so a
//! handler cannot outlive its claim, and two workers never deliver one shard at
//! the same time.
//!
//! # Example
//!
//! ```
//! # #[cfg(feature = "test-utils")] {
//! outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 } }
//! use outbox_core::{Drainer, MemoryStore, Message, OutboxKind, Receivers, ShardKey};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let shard = ShardKey::region(OutboxScope::OrgScope, 42);
//! for name in ["a", "b", "c"] {
//!     store.write(&shard, OutboxCategory::OrgUpdate, 42, Some(serde_json::json!({ "name": name })));
//! }
//! let receivers = Receivers::new().on(OutboxCategory::OrgUpdate, |msg: Message<OutboxCategory>| async move {
//!     assert_eq!(msg.payload.unwrap()["name"], "c"); // coalesced: newest payload only
//!     Ok::<_, outbox_core::HandlerError>(())
//! });
//! let drainer = Drainer::new(store.clone(), receivers);
//! let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
//! assert_eq!((report.deliveries, report.rows_deleted), (1, 3));
//! # });
//! # }
//! ```

mod abandoned;
mod config;
mod engine;
mod report;

pub use config::{
    DrainConfig, DEFAULT_BATCH_SIZE, DEFAULT_CONCURRENCY, DEFAULT_DELETE_CHUNK,
    DEFAULT_DELIVERY_TIMEOUT, DEFAULT_LEASE, DEFAULT_MAX_ROWS_PER_CLAIM, DEFAULT_SHARDS_PER_CLAIM,
    DEFAULT_SYNC_WAIT,
};
pub use engine::{DeadLetterPolicy, Drainer};
pub use report::{DeliveryError, DrainReport, FlushError, ShardFailure};
