//! Test support for the outbox crates, as `tokio-test` is for tokio: add it
//! as a dev-dependency.
//!
//! - [`drain_until_idle`]: drain everything due, as Sentry's
//!   `outbox_runner()` does;
//! - [`Recorder`]: receivers that record what they are given (and [`Gate`]s
//!   to hold them at);
//! - [`contracts`]: three versions of one payload, for rolling-deploy tests;
//! - [`conformance`]: the store conformance suite every `Store` passes
//!   (`MemoryStore`, PostgreSQL and SQLite);
//! - [`simulation`]: seeded, deterministic schedules of writes, crashes,
//!   pauses and clock jumps over `MemoryStore`, checked against the rules
//!   (the `simulate` example runs many);
//! - [`settled`]: wait, within a bound, until a worker has nothing left to
//!   do (`WorkerHandle::settled`), instead of polling the tables;
//! - `nats` (feature `nats`): a throwaway `nats-server -js` for JetStream
//!   tests;
//! - [`mod@bench`]: the Markdown tables the benches print;
//! - [`seed`]: a randomised test's seed, from an environment variable to
//!   replay a run, printed either way;
//! - `database` (feature `seaorm`): real PostgreSQL and SQLite databases for
//!   code built on `outbox-seaorm`, a fresh one per test with
//!   `#[outbox_testing::test]` (in the style of `#[sqlx::test]`), throwaway
//!   PostgreSQL clusters, PgBouncer, a wire-protocol statement counter, and
//!   `on_both_backends!`.
//!
//! ```toml
//! [dev-dependencies]
//! outbox-testing = { version = "0.1", features = ["seaorm"] } # without: no SeaORM
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod bench;
pub mod conformance;
pub mod contracts;
#[cfg(feature = "seaorm")]
#[cfg_attr(docsrs, doc(cfg(feature = "seaorm")))]
pub mod database;
#[cfg(feature = "nats")]
#[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
pub mod nats;
mod recorder;
mod runner;
mod seed;
mod settle;
pub mod simulation;

#[cfg(feature = "seaorm")]
#[cfg_attr(docsrs, doc(cfg(feature = "seaorm")))]
pub use outbox_seaorm_derive::test;
pub use recorder::{Delivery, Gate, Recorder};
pub use runner::{drain_until_idle, RunnerError, MAX_ROUNDS};
pub use seed::seed;
pub use settle::{settled, SETTLE_BOUND};
