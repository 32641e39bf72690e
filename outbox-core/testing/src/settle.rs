//! [`settled`]: a worker's settle wait, bounded for a test.

use std::future::IntoFuture;
use std::time::Duration;

use outbox_core::worker::SettleError;

/// How long [`settled`] waits before it fails the test: 120 s. A bound
/// against a hang (a wake-up lost, a round stuck), far above any drain of a
/// test's rows on a loaded machine; not a speed.
pub const SETTLE_BOUND: Duration = Duration::from_secs(120);

/// Waits for `settle` (a worker's `settled()`: `outbox_core::worker` or
/// `outbox_axum`'s `WorkerHandle`) within [`SETTLE_BOUND`], and panics
/// with what went wrong otherwise: the test's rows are delivered, or
/// backing off, once it returns.
///
/// ```
/// outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 } }
/// use outbox_core::worker::WorkerBuilder;
/// use outbox_core::{Drainer, MemoryStore, OutboxKind, ShardKey};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let recorder = outbox_testing::Recorder::<OutboxCategory>::new();
/// let worker = WorkerBuilder::new(Drainer::new(store.clone(), recorder.receivers())).spawn();
/// store.write(&ShardKey::region(OutboxScope::OrgScope, 1), OutboxCategory::OrgUpdate, 1, None);
/// outbox_testing::settled(worker.settled()).await;
/// assert_eq!(recorder.deliveries().len(), 1);
/// worker.shutdown().await;
/// # });
/// ```
///
/// # Panics
///
/// When the worker has not settled within the bound, when it stopped
/// first, or when its store failed.
pub async fn settled(settle: impl IntoFuture<Output = Result<(), SettleError>>) {
    match tokio::time::timeout(SETTLE_BOUND, settle.into_future()).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => panic!("the outbox did not settle: {error}"),
        Err(_) => panic!(
            "the outbox did not settle within {SETTLE_BOUND:?}: a round or a flush's completion \
             never ended, or rows stay due that no round takes (a lost wake-up)"
        ),
    }
}
