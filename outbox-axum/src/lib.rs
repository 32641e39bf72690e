//! # outbox-axum
//!
//! The Axum integration of the outbox: a tower layer that gives each request a
//! transaction and an outbox context and flushes the touched shards after the
//! commit, the `Tx` extractor, and the background drain spawned at startup.
//!
//! **Status:** this crate is being built (issue 3). It exports nothing yet; until
//! then, open a transaction yourself, write with
//! [`outbox_seaorm::write_region`], commit, and call
//! [`outbox_core::Drainer::drain_shard`] with the rows you wrote, as the
//! `example-app` crate does.

#[doc(no_inline)]
pub use outbox_core;
#[doc(no_inline)]
pub use outbox_seaorm;
