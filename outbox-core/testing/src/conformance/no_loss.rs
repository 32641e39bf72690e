//! Rule 2: every committed row is eventually delivered. A worker that stops
//! half-way (cut off at shutdown, its process killed) changes when, never
//! whether.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::{drainer, org, update, Backend, OutboxCategory};
use crate::{drain_until_idle, Gate, Recorder};
use outbox_core::clock::ManualClock;
use outbox_core::drain::{DrainConfig, Drainer};
use outbox_core::shard::OutboxKind;
use outbox_core::store::StoreAdmin;

/// A worker whose first delivery hangs, with its round running in a task.
struct Stuck {
    drainer: Drainer<OutboxCategory>,
    round: tokio::task::JoinHandle<()>,
}

async fn stuck_worker<S: outbox_core::store::Store + Clone>(
    store: &S,
    clock: &ManualClock,
) -> Stuck {
    let recorder = Recorder::new();
    let first = Arc::new(AtomicBool::new(true));
    let gate: Gate = recorder.hold_when(move |_| first.swap(false, Ordering::SeqCst));
    let drainer = drainer(store.clone(), &recorder, clock, DrainConfig::default());
    let round = tokio::spawn({
        let drainer = drainer.clone();
        async move {
            let _ = drainer.drain_due(OutboxKind::Region).await;
        }
    });
    gate.reached(1).await;
    Stuck { drainer, round }
}

async fn write_three<B: Backend>(backend: &B, store: &B::Store) -> Vec<i64> {
    backend
        .write(
            store,
            &[
                update(&org(1), 1, 1),
                update(&org(1), 2, 2),
                update(&org(2), 3, 3),
            ],
        )
        .await
}

/// A round cut off in the middle of a delivery files its claims; once they
/// are released, another worker delivers every row, the interrupted one too.
pub async fn a_worker_cut_off_mid_delivery_loses_nothing<B: Backend>(backend: &B) {
    let store = backend.fresh("cut_off").await;
    let ids = write_three(backend, &store).await;
    let clock = ManualClock::starting_now();
    let stuck = stuck_worker(&store, &clock).await;
    stuck.round.abort();
    assert!(stuck.round.await.unwrap_err().is_cancelled());
    assert!(stuck.drainer.has_abandoned());

    let recorder = Recorder::new();
    let other = drainer(
        backend.reconnect(&store).await,
        &recorder,
        &clock,
        DrainConfig::default(),
    );
    let report = other.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.shards, 0, "the cut-off round's claims still hold");
    assert!(stuck.drainer.release_abandoned().await.unwrap() >= 1);
    assert!(!stuck.drainer.has_abandoned());
    drain_until_idle(&other, &[OutboxKind::Region])
        .await
        .unwrap();
    let mut delivered: Vec<i64> = recorder.deliveries().iter().map(|d| d.id).collect();
    delivered.sort_unstable();
    assert_eq!(delivered, ids);
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

/// A worker that dies without a word (nothing releases its claims) holds its
/// shards for one lease; then another worker delivers every row.
pub async fn a_crashed_worker_is_replaced_once_its_lease_ends<B: Backend>(backend: &B) {
    let store = backend.fresh("crashed").await;
    let ids = write_three(backend, &store).await;
    let clock = ManualClock::starting_now();
    let stuck = stuck_worker(&store, &clock).await;
    stuck.round.abort();
    let _ = stuck.round.await;
    drop(stuck.drainer); // the process is gone: nobody releases anything

    let recorder = Recorder::new();
    let config = DrainConfig::default();
    let other = drainer(backend.reconnect(&store).await, &recorder, &clock, config);
    assert_eq!(other.drain_due(OutboxKind::Region).await.unwrap().shards, 0);
    clock.advance(config.lease_duration());
    drain_until_idle(&other, &[OutboxKind::Region])
        .await
        .unwrap();
    let mut delivered: Vec<i64> = recorder.deliveries().iter().map(|d| d.id).collect();
    delivered.sort_unstable();
    assert_eq!(delivered, ids);
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}
