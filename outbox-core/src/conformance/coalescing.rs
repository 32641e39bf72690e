//! Rule 4: a delivery carries the payload of its group's highest id; after
//! success every row of the group at or below it is deleted, and rows that
//! arrived meanwhile stay for the next round.

use super::{drainer, org, update, v, Backend};
use crate::clock::ManualClock;
use crate::drain::DrainConfig;
use crate::shard::OutboxKind;
use crate::store::StoreAdmin;
use crate::testing::Recorder;

/// Five updates of one object are one delivery with the fifth payload,
/// acknowledging all five rows; another object of the shard is its own group.
pub async fn only_the_newest_payload_of_a_group_is_delivered<B: Backend>(backend: &B) {
    let store = backend.fresh("coalescing").await;
    let shard = org(1);
    let mut rows: Vec<_> = (0..5).map(|n| update(&shard, 7, n)).collect();
    rows.push(update(&shard, 8, 100));
    let ids = backend.write(&store, &rows).await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    let drainer = drainer(store.clone(), &recorder, &clock, DrainConfig::default());
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.deliveries, report.rows_deleted), (2, 6));
    let deliveries = recorder.deliveries();
    assert_eq!(deliveries.len(), 2);
    let group = &deliveries[0];
    assert_eq!(
        (
            group.object,
            v(&group.payload),
            group.coalesced,
            group.first_id,
            group.id
        ),
        (7, 4, 5, ids[0], ids[4])
    );
    assert_eq!((deliveries[1].object, v(&deliveries[1].payload)), (8, 100));
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

/// A newer row of a group written while the group is being delivered is not
/// deleted with it: the next round delivers it, with its own payload.
pub async fn rows_written_during_a_delivery_stay_for_the_next_round<B: Backend>(backend: &B) {
    let store = backend.fresh("written_during").await;
    let shard = org(1);
    backend
        .write(&store, &[update(&shard, 7, 1), update(&shard, 7, 2)])
        .await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    let gate = recorder.hold_when(|message| message.object_identifier == 7);
    let drainer = drainer(store.clone(), &recorder, &clock, DrainConfig::default());
    let round = tokio::spawn({
        let drainer = drainer.clone();
        async move { drainer.drain_due(OutboxKind::Region).await.unwrap() }
    });
    gate.reached(1).await;
    backend.write(&store, &[update(&shard, 7, 3)]).await;
    gate.open();
    let report = round.await.unwrap();
    assert_eq!((report.deliveries, report.rows_deleted), (1, 2));
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 1);

    drainer.drain_due(OutboxKind::Region).await.unwrap();
    let payloads: Vec<i64> = recorder
        .deliveries()
        .iter()
        .map(|d| v(&d.payload))
        .collect();
    assert_eq!(payloads, vec![2, 3]);
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}
