//! # outbox-core
//!
//! The database-free heart of a transactional outbox modelled on Sentry's
//! hybrid-cloud outboxes: a compile-time registry of scopes and categories,
//! shards, coalescing, whole-shard backoff, receivers, and a drain engine
//! written against the [`store::DrainStore`] trait.
//!
//! - [`registry!`] declares scopes and categories; the compiler rejects a
//!   category in two scopes or a number used twice.
//! - Rows are grouped into [`ShardKey`]s (scope + identifier, plus region for
//!   the control outbox). A shard is delivered in order by one worker at a time.
//! - Within a shard, rows of one `(category, object)` form a
//!   [`CoalescingGroup`](coalesce::CoalescingGroup): only its newest payload
//!   is delivered.
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
//! # What is at the root
//!
//! What an application names: declaring its outbox ([`registry!`],
//! [`Category`], [`Scope`], [`ShardKey`], [`OutboxKind`]); receiving
//! ([`Receivers`], [`Message`], [`Payload`], [`HandlerError`],
//! [`permanent`], [`retry_after`], [`FencingToken`], [`TraceParent`]);
//! running and operating the drain ([`Drainer`], [`DrainerBuilder`],
//! [`DrainConfig`], [`DrainOperator`], [`DrainView`], runtime controls,
//! clocks, [`MemoryStore`] for tests); and what these hand back: reports
//! ([`DrainReport`], [`FlushOutcome`], [`Backlog`]), the rows of the view
//! ([`ShardDepth`], [`FailingShard`], [`ShardState`], [`Count`], …) and
//! every error they return.
//!
//! Elsewhere, by who needs it:
//!
//! - [`store`]: what a store's implementer needs and an application never
//!   names: the traits ([`store::DrainStore`], [`store::StoreAdmin`],
//!   [`store::ClaimBeforeCommit`]), claims and commits
//!   ([`store::ClaimRequest`], [`store::CommitBatch`], [`store::ShardEnd`],
//!   …), rows as stored ([`store::StoredRow`]) and the times a row is
//!   scheduled for ([`store::due_at_once`], …);
//! - the engine's parts a store or a test may look at: [`coalesce`],
//!   [`shard`]'s bucket constants, [`memory`]'s transaction;
//! - one module per topic an application reaches into when it needs it:
//!   [`worker`], [`fence`], [`trace`], [`sink`], [`history`], [`audit`],
//!   [`metrics`], [`delivery_headers`].
//!
//! Items that left the root keep their old path, deprecated, until 0.2.
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

pub mod asyncapi;
pub mod audit;
pub mod backoff;
pub mod clock;
pub mod coalesce;
pub mod context;

pub mod control;
pub mod delivery_headers;
mod deprecated;
pub mod drain;
mod error_debug;
pub mod fence;
mod fence_token;
pub mod history;
pub mod memory;
pub mod message;
pub mod metrics;
pub mod payload;
pub mod receiver;
pub mod registry;
pub use registry::contract;
mod schedule;
pub mod shard;
pub mod sink;
pub mod store;
pub mod trace;
pub mod worker;

// Declaring the outbox: `registry!` (exported by the macro itself).
pub use contract::{Contract, TypedCategory, UnknownVersion, Upcasts};
pub use registry::{Category, Scope, UnknownCategory, UnknownScope};
pub use shard::{InvalidShardKey, OutboxKind, ShardKey, UnknownOutboxKind};

// What a receiver gets and answers.
pub use fence_token::FencingToken;
pub use message::{Message, PayloadError};
pub use payload::Payload;
pub use receiver::{
    is_permanent, permanent, requested_retry_after, retry_after, BatchFuture, BatchItem,
    CategoryPayload, HandlerError, IncompleteReceivers, Permanent, Receivers, RetryAfter,
};
/// The JSON Schema crate a [`Contract`] derives `JsonSchema` from.
pub use schemars;
pub use trace::TraceParent;
/// The UUID crate of [`Message::message_id`], for receivers that store it.
pub use uuid;

// Running the drain, operating it, and what it reports.
pub use backoff::BackoffPolicy;
pub use clock::{Clock, ManualClock, SystemClock};
pub use context::OutboxContext;
pub use control::{ControlAction, ControlTarget, Controls, RuntimeControl};
pub use drain::{
    Backlog, DeadLetterPolicy, DeliveryError, DrainConfig, DrainOperator, DrainReport, DrainView,
    Drainer, DrainerBuilder, FlushError, FlushOutcome, HeadMessage, PreparedFlush, ScopeBacklog,
    ShardFailure,
};
pub use memory::MemoryStore;
pub use store::{
    BoxError, Count, DeadLetterRow, FailingShard, ScopeDepth, ShardDepth, ShardState, ShardStatus,
    StoreError,
};

// The old root paths of what moved to `store`, `coalesce`, `memory` and
// `shard`, deprecated (see `deprecated.rs`).
#[doc(hidden)]
pub use deprecated::*;
