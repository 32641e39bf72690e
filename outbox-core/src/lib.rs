//! # outbox-core
//!
//! The database-free heart of a transactional outbox modelled on Sentry's
//! hybrid-cloud outboxes: a compile-time registry of scopes and categories,
//! shards, coalescing, whole-shard backoff, receivers, and a drain engine
//! written against the [`DrainStore`] trait.
//!
//! - [`registry!`] declares scopes and categories; the compiler rejects a
//!   category in two scopes or a number used twice.
//! - Rows are grouped into [`ShardKey`]s (scope + identifier, plus region for
//!   the control outbox). A shard is delivered in order by one worker at a time.
//! - Within a shard, rows of one `(category, object)` form a
//!   [`CoalescingGroup`]: only its newest payload is delivered.
//! - A failing receiver stops its shard, which is retried as a whole after a
//!   doubling delay ([`BackoffPolicy`]).
//! - [`Drainer`] runs it all: [`Drainer::drain_shard`] is the synchronous flush
//!   after a commit, [`Drainer::drain_due`] one round of the background drain.
//! - Each row keeps the W3C `traceparent` of the span that wrote it, and its
//!   delivery span (`outbox.deliver`) continues that trace, with
//!   OpenTelemetry's messaging attributes ([`trace`]).
//! - [`sink`]s are receivers that forward messages to a broker for other
//!   services to consume: `sink::jetstream` (feature `nats`) publishes to
//!   NATS JetStream, one subject per shard, de-duplicated by message id.
//!
//! Databases live in `outbox-seaorm`; this crate ships `MemoryStore` for
//! fast tests. Test support (drain-until-idle, a recording receiver, the
//! conformance suite, the simulator) is the `outbox-testing` crate.
//!
//! ```
//! outbox_core::registry! {
//!     OrganizationScope = 0 (shard_field = "organization_id") {
//!         OrganizationUpdate = 1,
//!     }
//! }
//! use outbox_core::{Drainer, MemoryStore, Message, OutboxKind, Receivers, ShardKey};
//! use std::sync::{Arc, Mutex};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let seen = Arc::new(Mutex::new(Vec::new()));
//! let receivers = Receivers::new().on(OutboxCategory::OrganizationUpdate, {
//!     let seen = seen.clone();
//!     move |msg: Message<OutboxCategory>| {
//!         seen.lock().unwrap().push(msg.object_identifier);
//!         async { Ok::<_, outbox_core::HandlerError>(()) }
//!     }
//! });
//! receivers.ensure_complete().unwrap();
//!
//! let store = MemoryStore::new();
//! let shard = ShardKey::region(OutboxScope::OrganizationScope, 7);
//! let id = store.write(&shard, OutboxCategory::OrganizationUpdate, 7, None);
//!
//! let drainer = Drainer::new(store, receivers);
//! drainer.drain_shard(&shard, Some(id)).await.unwrap();
//! assert_eq!(*seen.lock().unwrap(), vec![7]);
//! # });
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod audit;
pub mod backoff;
pub mod clock;
pub mod coalesce;
pub mod context;
pub mod control;
pub mod delivery_headers;
pub mod drain;
pub mod fence;
mod fence_token;
pub mod history;
pub mod memory;
pub mod message;
pub mod metrics;
pub mod payload;
pub mod receiver;
pub mod registry;
pub mod shard;
pub mod sink;
pub mod store;
pub mod trace;
pub mod worker;

pub use backoff::BackoffPolicy;
pub use clock::{Clock, ManualClock, SystemClock};
pub use coalesce::{coalesce, CoalescingGroup};
pub use context::OutboxContext;
pub use control::{ControlAction, ControlTarget, Controls, RuntimeControl};
pub use drain::{
    Backlog, DeadLetterPolicy, DeliveryError, DrainConfig, DrainOperator, DrainReport, DrainView,
    Drainer, DrainerBuilder, FlushError, FlushOutcome, HeadMessage, PreparedFlush, ScopeBacklog,
    ShardFailure,
};
pub use fence_token::FencingToken;
pub use memory::{MemoryStore, MemoryTransaction};
pub use message::{Message, PayloadError, StoredRow};
pub use payload::Payload;
pub use receiver::{
    is_permanent, permanent, requested_retry_after, retry_after, BatchFuture, BatchItem,
    HandlerError, IncompleteReceivers, Permanent, Receivers, RetryAfter,
};
pub use registry::{Category, Scope, UnknownCategory, UnknownScope};
pub use shard::{
    InvalidShardKey, OutboxKind, ShardKey, UnknownOutboxKind, CLAIM_BUCKETS, MAX_BUCKETS_PER_CLAIM,
};
pub use store::{
    BoxError, ClaimBeforeCommit, ClaimOrder, ClaimRequest, ClaimedShard, CommitBatch,
    CommitOutcome, Count, DeadLetter, DeadLetterRow, DrainStore, DueClaim, FailingShard,
    ScopeDepth, ShardClaim, ShardCommit, ShardDepth, ShardEnd, ShardState, ShardStatus, Store,
    StoreAdmin, StoreError,
};
pub use trace::TraceParent;
/// The UUID crate of [`Message::message_id`], for receivers that store it.
pub use uuid;

/// The `retry_at` of a quarantined shard (and the `scheduled_for` of its
/// rows): 9999-01-01, a time no clock reaches. A receiver's
/// [`permanent`] error quarantines its shard unless the scope dead-letters;
/// `StoreAdmin::retry_now` releases it.
pub fn quarantined_until() -> chrono::DateTime<chrono::Utc> {
    use chrono::TimeZone;
    chrono::Utc
        .with_ymd_and_hms(9999, 1, 1, 0, 0, 0)
        .single()
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC)
}

/// The `retry_at` of a shard parked by an operator's pause (and the
/// `scheduled_for` of its rows): 9998-01-01, a time no clock reaches and
/// before [`quarantined_until`]. Resuming the pause releases it (see
/// [`control`]).
pub fn paused_until() -> chrono::DateTime<chrono::Utc> {
    use chrono::TimeZone;
    chrono::Utc
        .with_ymd_and_hms(9998, 1, 1, 0, 0, 0)
        .single()
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC)
}

/// The `scheduled_for` given to new rows: `2016-08-01`, so a new row is due at
/// once whatever the clocks of the processes that drain it (as Sentry does).
pub fn the_past() -> chrono::DateTime<chrono::Utc> {
    use chrono::TimeZone;
    chrono::Utc
        .with_ymd_and_hms(2016, 8, 1, 0, 0, 0)
        .single()
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC)
}
