//! `OutboxLayer`: a transaction and an outbox context per request, the commit,
//! and the synchronous flush after it.
//!
//! For every request the layer:
//!
//! 1. inserts a slot for the request's transaction (begun lazily, by the first
//!    statement run on the request's [`Tx`](crate::Tx), so that a request
//!    holds no connection while its body is read) and opens an
//!    [`OutboxContext`](outbox_core::OutboxContext) around the handler, so that
//!    every outbox row written during the request is noted;
//! 2. after the handler, commits when the response is a success (by default:
//!    not 4xx or 5xx; see [`OutboxLayer::commit_when`]) and rolls back
//!    otherwise; before a `COMMIT`, its last statement claims the shards the
//!    request wrote (one statement that never waits for another worker or
//!    request: see [`OutboxLayer::claim_before_commit`]);
//! 3. after the commit, delivers each shard the request wrote, up to the
//!    highest id it wrote, from the rows its claim read, *before* the
//!    response goes out, so a client that gets its response can read the
//!    replicated effect; the delete and release run in the background
//!    (nothing more is sent to the database before the response);
//! 4. wakes the background drain when rows were left to it (the worker of
//!    this process, or others with `NOTIFY` on PostgreSQL when this process
//!    drains no rows of that kind).
//!
//! # When nothing is committed
//!
//! - The response is a 4xx or 5xx (or fails your `commit_when` predicate).
//! - The handler panics: the transaction is rolled back and the panic resumes.
//! - The client disconnects before the response: the request future is dropped,
//!   and with it the transaction, which rolls back.
//! - A `Tx` is still alive when the response is ready (moved into a spawned
//!   task): the layer answers 500 instead of reporting a success it cannot
//!   commit; the transaction rolls back when that `Tx` is dropped.
//! - The commit itself fails: the layer answers 500.
//!
//! # Flush failures
//!
//! The rows are committed, so nothing is lost: the background drain delivers
//! them after the shard's backoff (or, for a shard an operator paused, once
//! the pause is lifted). What the client hears is decided by an
//! [`OnFlushError`] hook: by default ([`DefaultOnFlushError`]) the handler's
//! response, with an `outbox-flush` header that says why (see below);
//! [`RespondWith`] a status of your choice; `()` the response untouched; or
//! your own closure.
//!
//! # When hooks run
//!
//! `commit_when` runs once per request, after the handler, on its response,
//! before anything is committed (it decides commit or roll back). The
//! [`OnFlushError`] hook runs at most once per request, after the commit and
//! after every noted shard was flushed, only when at least one flush failed;
//! each failure was already logged at `WARN` by then. Neither runs when the
//! handler panicked, its future was dropped, or a `Tx` was still alive.
//!
//! # `flush = false`
//!
//! [`OutboxCtx::defer_flush`](crate::OutboxCtx::defer_flush) in a handler, or
//! [`defer_flush`](crate::defer_flush) as a route middleware, leaves every row
//! of the request to the background drain; [`deferred`](crate::deferred)
//! defers only the rows written inside it.
//!
//! # What the client is told
//!
//! A response whose outbox rows were not all delivered before it left
//! carries [`FLUSH_HEADER`] (`outbox-flush`), whatever the reason:
//!
//! | reason | header | what a client may do |
//! |---|---|---|
//! | `flush = false`, rows written inside [`deferred`](crate::deferred), or another worker held the shard past the flush's wait | `deferred` | nothing: delivered shortly |
//! | the shard (or its scope) paused by an operator | `paused` (through the [`OnFlushError`] hook, [`FlushError::Paused`](outbox_core::FlushError::Paused)) | tell its user the side effects wait for maintenance |
//! | a receiver failed, the shard backs off or is quarantined, the claim was lost | `failed` (through the [`OnFlushError`] hook) | not assume the side effect happened; it is retried |
//! | an operator's cull dropped them | `culled` | know they will not happen |
//!
//! No header means every row the request wrote was delivered (or it wrote
//! none).
//!
//! # Ordering
//!
//! Add `OutboxLayer` with `.layer(...)` *after* the routes (it must wrap the
//! handlers that use `Tx`), and keep layers that turn errors into successes
//! (say, an error-mapping layer that answers 200) *outside* it, or the layer
//! sees the success and commits.
//!
//! ```text
//!         requests
//!            |
//!            v
//!   +---------------------+
//!   | TraceLayer, …        |
//!   | +-----------------+ |
//!   | | OutboxLayer     | |  begins lazily; commits or rolls back; flushes
//!   | | +-------------+ | |
//!   | | |  handler    | | |  Tx, OutboxCtx
//!   | | +-------------+ | |
//!   | +-----------------+ |
//!   +---------------------+
//! ```
//!
//! # Example
//!
//! ```no_run
//! outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 } }
//! use axum::{routing::post, Router};
//! use outbox_axum::{OutboxLayer, Tx};
//! use outbox_core::Receivers;
//! use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId};
//!
//! async fn rename(tx: Tx) -> Result<&'static str, axum::http::StatusCode> {
//!     write_region(&tx, OutboxMessage::new(OutboxCategory::OrgUpdate, ShardId(1), ObjectId(1)))
//!         .await
//!         .map_err(|_| axum::http::StatusCode::INTERNAL_SERVER_ERROR)?;
//!     Ok("renamed")
//! }
//!
//! # async fn run(db: sea_orm::DatabaseConnection) -> Result<(), Box<dyn std::error::Error>> {
//! let receivers = Receivers::new().discard(OutboxCategory::OrgUpdate);
//! let app: Router = Router::new()
//!     .route("/rename", post(rename))
//!     .layer(OutboxLayer::new(db, receivers)?);
//! # Ok(()) }
//! ```

mod future;
mod on_flush_error;
mod service;

pub use future::ResponseFuture;
pub use on_flush_error::{
    flush_header_value, DefaultOnFlushError, OnFlushError, RespondWith, FLUSH_CULLED,
    FLUSH_DEFERRED, FLUSH_FAILED, FLUSH_HEADER, FLUSH_PAUSED,
};
pub use service::{Outbox, OutboxLayer};
