//! Rule 7: a receiver runs without a transaction open on the outbox tables,
//! so it may take its time and write to the same database; a claim outlives
//! its worker only by a bounded lease, and a worker whose lease ended can no
//! longer write anything: no delete, no backoff, no dead letter.

use super::{drainer, org, update, Backend, NewRow, OutboxCategory};
use crate::{drain_until_idle, Recorder};
use outbox_core::clock::ManualClock;
use outbox_core::drain::DrainConfig;
use outbox_core::message::Message;
use outbox_core::receiver::Receivers;
use outbox_core::shard::OutboxKind;
use outbox_core::store::StoreAdmin;

/// A worker's receiver fails after the worker's lease ended and another
/// worker delivered the row: the stale worker's commit (a backoff) is
/// refused, and the shard is not marked as failing.
pub async fn a_worker_whose_lease_ended_writes_nothing<B: Backend>(backend: &B) {
    let store = backend.fresh("fencing").await;
    backend.write(&store, &[update(&org(1), 1, 1)]).await;
    let clock = ManualClock::starting_now();
    let config = DrainConfig::default();
    let stale = Recorder::new();
    stale.fail_when(|_| true);
    let gate = stale.hold_when(|_| true);
    let round = tokio::spawn({
        let drainer = drainer(store.clone(), &stale, &clock, config);
        async move { drainer.drain_due(OutboxKind::Region).await.unwrap() }
    });
    gate.reached(1).await;
    clock.advance(config.lease_duration());

    let fresh = Recorder::new();
    let other = drainer(backend.reconnect(&store).await, &fresh, &clock, config);
    assert_eq!(
        other
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .deliveries,
        1
    );
    gate.open();
    let report = round.await.unwrap();
    assert_eq!(report.lost_claims, vec![org(1)]);
    assert!(store
        .failing_shards(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .dead_letters(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

/// A receiver writes new outbox rows to the same database, and reads it,
/// while it is being delivered: nothing the drain holds stands in its way,
/// and the next round delivers what it wrote.
pub async fn receivers_run_outside_any_transaction<B: Backend>(backend: &B) {
    let store = backend.fresh("outside_transactions").await;
    backend.write(&store, &[update(&org(1), 1, 1)]).await;
    let recorder = Recorder::new();
    let receivers = {
        let (backend, store, recorder) = (backend.clone(), store.clone(), recorder.clone());
        let forward = recorder.clone();
        Receivers::new()
            .on(
                OutboxCategory::OrganizationUpdate,
                move |message: Message<OutboxCategory>| {
                    let (backend, store, recorder) =
                        (backend.clone(), store.clone(), recorder.clone());
                    async move {
                        let member = NewRow {
                            category: OutboxCategory::OrganizationMemberUpdate,
                            ..update(&org(2), 2, 2)
                        };
                        backend.write(&store, &[member]).await;
                        assert!(store.pending_count(OutboxKind::Region).await? >= 1);
                        recorder.handle(message).await
                    }
                },
            )
            .on(
                OutboxCategory::OrganizationMemberUpdate,
                move |message: Message<OutboxCategory>| {
                    let forward = forward.clone();
                    async move { forward.handle(message).await }
                },
            )
            .discard(OutboxCategory::AuditLogEvent)
            .discard(OutboxCategory::OrganizationWebhook)
            .discard(OutboxCategory::OrganizationRenamed)
    };
    receivers.ensure_complete().unwrap();
    let clock = ManualClock::starting_now();
    let drainer = outbox_core::drain::Drainer::builder(store.clone(), receivers)
        .clock(clock)
        .build();
    drain_until_idle(&drainer, &[OutboxKind::Region])
        .await
        .unwrap();
    let objects: Vec<i64> = recorder.deliveries().iter().map(|d| d.object).collect();
    assert_eq!(objects, vec![1, 2]);
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}
