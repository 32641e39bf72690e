//! Deprecated names kept until 0.2: they compile, and mean what their
//! successors mean.

#![allow(deprecated, clippy::unwrap_used, missing_docs)]

use axum::http::StatusCode;
use outbox_axum::{OutboxWorkerBuilder, TxRejection};
use outbox_core::Category;

/// `loops_per_kind` is `rounds_in_flight` (compiled, not run: a builder
/// needs a database).
#[allow(dead_code)]
fn loops_per_kind_sets_the_rounds_in_flight<C: Category>(
    builder: OutboxWorkerBuilder<C>,
) -> OutboxWorkerBuilder<C> {
    builder.loops_per_kind(2)
}

#[test]
fn the_old_waker_is_the_workers_waker() {
    let waker: outbox_axum::OutboxWaker = outbox_core::worker::Waker::new();
    waker.wake_local(outbox_core::OutboxKind::Region);
}

#[test]
fn a_match_on_the_old_begin_rejection_compiles() {
    let rejection = TxRejection::MissingLayer;
    let status = match rejection {
        TxRejection::Begin => StatusCode::SERVICE_UNAVAILABLE,
        other => other.status(),
    };
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(TxRejection::Begin.status(), StatusCode::SERVICE_UNAVAILABLE);
}
