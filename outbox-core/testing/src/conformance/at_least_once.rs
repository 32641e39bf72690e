//! Rule 6: handlers must be idempotent, because the library may call one
//! twice for the same change: when the worker that delivered it lost its
//! claim before its commit, the next owner delivers it again.

use super::{drainer, org, update, Backend};
use crate::Recorder;
use outbox_core::clock::ManualClock;
use outbox_core::drain::DrainConfig;
use outbox_core::shard::OutboxKind;
use outbox_core::store::StoreAdmin;

/// A worker stalls in a receiver past its lease; another worker claims the
/// shard and delivers the row; the stalled delivery then completes, but its
/// commit is refused: the row was delivered twice, and deleted once.
pub async fn a_delivery_whose_lease_ended_before_its_commit_is_made_again<B: Backend>(backend: &B) {
    let store = backend.fresh("at_least_once").await;
    let id = backend.write(&store, &[update(&org(1), 1, 1)]).await[0];
    let clock = ManualClock::starting_now();
    let config = DrainConfig::default();
    let stalled = Recorder::new();
    let gate = stalled.hold_when(|_| true);
    let round = tokio::spawn({
        let drainer = drainer(store.clone(), &stalled, &clock, config);
        async move { drainer.drain_due(OutboxKind::Region).await.unwrap() }
    });
    gate.reached(1).await;
    clock.advance(config.lease_duration());

    let next = Recorder::new();
    let other = drainer(backend.reconnect(&store).await, &next, &clock, config);
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
    assert_eq!(report.deliveries, 0, "a lost delivery is not counted");
    assert_eq!(stalled.calls(), 1);
    assert_eq!(next.deliveries()[0].id, id);
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}
