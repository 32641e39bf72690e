//! Test support for the outbox crates, as `tokio-test` is for tokio: add it
//! as a dev-dependency.
//!
//! - [`drain_until_idle`]: drain everything due, as Sentry's
//!   `outbox_runner()` does;
//! - [`Recorder`]: receivers that record what they are given (and [`Gate`]s
//!   to hold them at);
//! - [`conformance`]: the store conformance suite every `Store` passes
//!   (`MemoryStore`, PostgreSQL and SQLite);
//! - [`simulation`]: seeded, deterministic schedules of writes, crashes,
//!   pauses and clock jumps over `MemoryStore`, checked against the rules
//!   (the `simulate` example runs many);
//! - [`nats`]: a throwaway `nats-server -js` for JetStream tests.
//!
//! PostgreSQL and SQLite test databases are in `outbox_seaorm::testing`
//! (`outbox-seaorm`'s feature `test-utils`).

pub mod conformance;
pub mod nats;
mod recorder;
mod runner;
pub mod simulation;

pub use recorder::{Delivery, Gate, Recorder};
pub use runner::{drain_until_idle, RunnerError, MAX_ROUNDS};
