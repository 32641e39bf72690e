//! # outbox-axum
//!
//! The Axum side of the outbox. Mount one layer and extract one type, and your
//! writes become reliable side effects:
//!
//! - [`OutboxLayer`] gives each request a transaction (begun lazily) and an
//!   outbox context, commits after a successful response, rolls back
//!   otherwise, and flushes the shards the request wrote *before* the response
//!   leaves, so a client that sees its response can read the replicated effect.
//! - [`Tx`] is the request's transaction, usable wherever SeaORM takes a
//!   `ConnectionTrait`; [`OutboxCtx`], [`defer_flush`] and [`deferred`] opt
//!   rows out of the synchronous flush (`flush = false`).
//! - [`OutboxWorker`] spawns the background drain at startup: it refuses to
//!   start when a category has no receiver, wakes on in-process commits and
//!   PostgreSQL `NOTIFY`, polls as a fallback, survives the database going
//!   away, and shuts down gracefully.
#![cfg_attr(
    feature = "admin",
    doc = "- [`admin::Admin`] is the operators' JSON API and dashboard (feature
  `admin`, on by default), a router to nest beside yours; serve the app
  with `into_make_service_with_connect_info::<SocketAddr>()`, since it
  counts wrong credentials per client address (see
  [the guide's chapter](_guide::_03_admin))."
)]
//!
//! New to the outbox? [The guide](_guide) goes from adding the crates to a
//! served worker with its admin router, then gives each feature a chapter
//! ([listed below](#the-guide)).
//!
//! The example below also needs `tokio` with the `macros`, `rt-multi-thread`,
//! `net` and `signal` features (for `#[tokio::main]`, the listener and
//! Ctrl-C), `outbox-migrations` and `sea-orm-migration`:
//!
//! ```
//! outbox_core::registry! {
//!     OrganizationScope = 0 (shard_field = "organization_id") {
//!         OrganizationUpdate = 1,
//!     }
//! }
//! use axum::{extract::Path, routing::put, Router};
//! use outbox_axum::{OutboxWorker, Tx};
//! use outbox_core::{HandlerError, Message, Receivers};
//! use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId};
//! use sea_orm_migration::MigratorTrait;
//!
//! async fn rename(tx: Tx, Path(id): Path<i64>) -> Result<&'static str, axum::http::StatusCode> {
//!     // ... update the organization with `&tx` ...
//!     let message = OutboxMessage::new(OutboxCategory::OrganizationUpdate, ShardId(id), ObjectId(id));
//!     write_region(&tx, message)
//!         .await
//!         .map_err(|_| axum::http::StatusCode::INTERNAL_SERVER_ERROR)?;
//!     Ok("renamed") // committed, then flushed: the receiver has run
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let url = "sqlite://app.sqlite?mode=rwc";
//!     # let file = std::env::temp_dir().join(format!("outbox-axum-doc-{}.sqlite", std::process::id()));
//!     # let url = &format!("sqlite://{}?mode=rwc", file.display());
//!     let db = outbox_seaorm::sqlite::connect(url).await?; // WAL and a busy timeout
//!     // The outbox tables (or `outbox_migrations::migrations()` in your own Migrator).
//!     outbox_migrations::OutboxMigrator::up(&db, None).await?;
//!     let receivers = Receivers::new().on(OutboxCategory::OrganizationUpdate, |msg: Message<OutboxCategory>| async move {
//!         println!("replicate organization {}", msg.object_identifier);
//!         Ok::<_, HandlerError>(())
//!     });
//!     // Refuses to start without a receiver per category or without the migrations.
//!     let worker = OutboxWorker::builder(db.clone(), receivers).spawn().await?;
//!     let app = Router::new()
//!         .route("/organizations/{id}", put(rename))
//!         .layer(worker.layer());
//!     worker.stop_on(outbox_axum::shutdown_signal()); // Ctrl-C or SIGTERM
//!     let stopping = worker.stopping(); // cancelled when the worker stops: the server stops too
//!     let addr = "127.0.0.1:3000";
//!     # let addr = "127.0.0.1:0"; stopping.cancel(); // the doctest stops at once
//!     let listener = tokio::net::TcpListener::bind(addr).await?;
//!     axum::serve(listener, app)
//!         .with_graceful_shutdown(stopping.cancelled_owned())
//!         .await?;
//!     worker.shutdown().await;
//!     # db.close().await?; for s in ["", "-wal", "-shm"] { let _ = std::fs::remove_file(format!("{}{s}", file.display())); }
//!     Ok(())
//! }
//! ```
//!
//! # The guide
//!
//! [`_guide`] walks from adding the crates to a served worker with its admin
//! router, then through each feature, one chapter each (every example a
//! doctest that runs on SQLite):
//!
//! 1. [First steps](_guide::_01_first_steps): registry, migrations, a write,
//!    its receiver, the drain.
//! 2. [With Axum](_guide::_02_axum): `Tx`, the flush before the response,
//!    the worker, and the admin router served with each client's address.
//! 3. [The admin API and dashboard](_guide::_03_admin).
//! 4. [Your first hour](_guide::_04_first_hour): a whole small service
//!    (`examples/first_hour.rs`), with its tests.
//! 5. [SQLite](_guide::_05_sqlite).
//! 6. [Testing your app](_guide::_06_testing).
//! 7. [What the drain guarantees](_guide::_07_guarantees).
//! 8. [Metrics and traces](_guide::_08_observability).
//! 9. [Replicated models](_guide::_09_replicated_models) and their backfill.
//! 10. [Effectively once: the inbox](_guide::_10_inbox).
//! 11. [Fencing tokens](_guide::_11_fencing): order under paused workers
//!     and late commits.
//! 12. [NATS JetStream](_guide::_12_jetstream) (feature `nats`).
//! 13. [Signed delivery](_guide::_13_signed_delivery) over HTTP (feature
//!     `webhook`).
//! 14. [The CLI](_guide::_14_cli) (feature `cli` of `outbox-seaorm`).
//! 15. [Message contracts](_guide::_15_contracts): a payload type per
//!     category, and versions through a rolling deploy.
//!
//! Locally: `cargo doc -p outbox-axum --open`.
//!
//! To publish categories to NATS JetStream for other services, register
//! `outbox_core::sink::jetstream::JetStreamSink` as their receiver (feature
//! `nats` of this crate or of `outbox-core`); the worker then deletes each
//! message's rows only once JetStream has stored it.
//!
//! Outside HTTP (a job), use the same context API:
//! [`OutboxContext::scope`](outbox_core::OutboxContext::scope) around the
//! transaction, then [`OutboxContext::flush`](outbox_core::OutboxContext::flush)
//! after the commit.

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "admin")]
#[cfg_attr(docsrs, doc(cfg(feature = "admin")))]
pub mod admin;
pub mod apply_once;
mod context;
mod deprecated;
mod error_debug;
pub mod layer;
mod slot;
mod tx;
#[cfg(feature = "webhook")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhook")))]
pub mod webhook;
pub mod worker;

pub use context::{defer_flush, deferred, OutboxCtx};
#[allow(deprecated)]
#[doc(hidden)]
pub use deprecated::OutboxWaker;
pub use layer::{
    flush_header_value, DefaultOnFlushError, OnFlushError, Outbox, OutboxLayer, RespondWith,
    ResponseFuture, FLUSH_CULLED, FLUSH_DEFERRED, FLUSH_FAILED, FLUSH_HEADER, FLUSH_PAUSED,
};
pub use tx::{Tx, TxRejection};
pub use worker::{shutdown_signal, OutboxWorker, OutboxWorkerBuilder, WorkerError, WorkerHandle};

// The guide, chapter by chapter: empty modules, read with `cargo doc`;
// their Rust blocks are doctests of this crate. Each chapter is a Markdown
// file inside this crate's folder, so that it packages with the crate;
// compiled in every build, so that `cargo package` reads them too. The
// chapters that serve the admin router are read with `admin` (a default
// feature, on for docs.rs and `cargo package`); without it, their modules
// stay, so that links to them hold, and say what they need.
#[doc = include_str!("docs/guide/index.md")]
pub mod _guide {
    #[doc = include_str!("docs/guide/01-first-steps.md")]
    pub mod _01_first_steps {}
    #[cfg_attr(feature = "admin", doc = include_str!("docs/guide/02-axum.md"))]
    #[cfg_attr(
        not(feature = "admin"),
        doc = "With Axum: the layer, `Tx`, the worker and the admin router served \
               together. This chapter needs the `admin` feature (on by default)."
    )]
    pub mod _02_axum {}
    #[cfg_attr(feature = "admin", doc = include_str!("docs/guide/03-admin.md"))]
    #[cfg_attr(
        not(feature = "admin"),
        doc = "The admin API and dashboard: this chapter needs the `admin` feature \
               (on by default)."
    )]
    #[cfg_attr(docsrs, doc(cfg(feature = "admin")))]
    pub mod _03_admin {}
    #[doc = include_str!("docs/guide/04-first-hour.md")]
    pub mod _04_first_hour {}
    #[doc = include_str!("docs/guide/05-sqlite.md")]
    pub mod _05_sqlite {}
    #[doc = include_str!("docs/guide/06-testing.md")]
    pub mod _06_testing {}
    #[doc = include_str!("docs/guide/07-guarantees.md")]
    pub mod _07_guarantees {}
    #[doc = include_str!("docs/guide/08-observability.md")]
    pub mod _08_observability {}
    #[doc = include_str!("docs/guide/09-replicated-models.md")]
    pub mod _09_replicated_models {}
    #[doc = include_str!("docs/guide/10-inbox.md")]
    pub mod _10_inbox {}
    #[doc = include_str!("docs/guide/11-fencing.md")]
    pub mod _11_fencing {}
    #[doc = include_str!("docs/guide/12-jetstream.md")]
    pub mod _12_jetstream {}
    #[doc = include_str!("docs/guide/13-signed-delivery.md")]
    pub mod _13_signed_delivery {}
    #[doc = include_str!("docs/guide/14-cli.md")]
    pub mod _14_cli {}
    #[doc = include_str!("docs/guide/15-contracts.md")]
    pub mod _15_contracts {}
}

// The layer and the worker do not know each other; this is where they meet.
impl<C: outbox_core::Category> WorkerHandle<C> {
    /// An [`OutboxLayer`] sharing this worker's drainer and waking it when a
    /// request leaves rows to it: mount it on the router.
    pub fn layer(&self) -> OutboxLayer<C> {
        OutboxLayer::from_parts(self.connection().clone(), self.drainer().clone())
            .waker(self.waker().clone())
    }
}
