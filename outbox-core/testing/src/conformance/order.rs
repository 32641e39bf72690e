//! Rule 3, order: within a shard, groups are delivered in the order of their
//! lowest pending id, across rounds, batches, failures and recoveries.

use std::time::Duration;

use super::{drainer, org, update, v, Backend};
use crate::{drain_until_idle, Recorder};
use outbox_core::backoff::BackoffPolicy;
use outbox_core::clock::ManualClock;
use outbox_core::drain::DrainConfig;
use outbox_core::shard::OutboxKind;
use outbox_core::store::StoreAdmin;

/// Interleaved writes of four objects on one shard are delivered object by
/// object in the order each first appeared, each with its newest payload;
/// small batches spread them over rounds without reordering them.
pub async fn groups_are_delivered_in_order_of_their_lowest_id<B: Backend>(backend: &B) {
    let store = backend.fresh("order").await;
    let shard = org(1);
    let objects = [1, 2, 1, 3, 2, 4];
    let rows: Vec<_> = objects
        .iter()
        .enumerate()
        .map(|(n, object)| update(&shard, *object, n as i64))
        .collect();
    backend.write(&store, &rows).await;
    let clock = ManualClock::starting_now();

    let recorder = Recorder::new();
    drain_until_idle(
        &drainer(store.clone(), &recorder, &clock, DrainConfig::default()),
        &[OutboxKind::Region],
    )
    .await
    .unwrap();
    let delivered: Vec<(i64, i64)> = recorder
        .deliveries()
        .iter()
        .map(|d| (d.object, v(&d.payload)))
        .collect();
    assert_eq!(delivered, vec![(1, 2), (2, 4), (3, 3), (4, 5)]);

    // Two rows per round: a group can be cut, never overtaken.
    backend.write(&store, &rows).await;
    let recorder = Recorder::new();
    let small = DrainConfig::default().batch_size(2);
    drain_until_idle(
        &drainer(store.clone(), &recorder, &clock, small),
        &[OutboxKind::Region],
    )
    .await
    .unwrap();
    let first_ids: Vec<i64> = recorder.deliveries().iter().map(|d| d.first_id).collect();
    assert!(
        first_ids.windows(2).all(|w| w[0] < w[1]),
        "groups overtook each other: {first_ids:?}"
    );
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

/// A shard that failed has its rows rescheduled; rows written during its
/// backoff and after its recovery are newer, and must still come after the
/// older ones, one row per round.
pub async fn a_recovered_shard_delivers_its_older_rows_before_newer_ones<B: Backend>(backend: &B) {
    let store = backend.fresh("recovered_order").await;
    let shard = org(1);
    backend
        .write(&store, &[update(&shard, 1, 1), update(&shard, 2, 2)])
        .await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    recorder.fail_when(|message| message.object_identifier == 1);
    let config = DrainConfig::default()
        .batch_size(1)
        .backoff(BackoffPolicy::new(
            Duration::from_secs(1),
            Duration::from_secs(60),
        ));
    let drainer = drainer(store.clone(), &recorder, &clock, config);
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.failures.len(), 1);

    // Written during the backoff: due at once, yet behind rows 1 and 2.
    backend.write(&store, &[update(&shard, 3, 3)]).await;
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 0, "the shard backs off");

    recorder.stop_failing();
    clock.advance(Duration::from_secs(1));
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 1);
    // Written after the recovery of the first row, before the rest.
    backend.write(&store, &[update(&shard, 4, 4)]).await;
    drain_until_idle(&drainer, &[OutboxKind::Region])
        .await
        .unwrap();
    let objects: Vec<i64> = recorder.deliveries().iter().map(|d| d.object).collect();
    assert_eq!(objects, vec![1, 2, 3, 4]);
    assert!(store
        .failing_shards(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());
}

/// A synchronous flush delivers its shard up to the id it was given, in
/// order; later rows wait for the background drain.
pub async fn a_sync_flush_delivers_only_up_to_its_id<B: Backend>(backend: &B) {
    let store = backend.fresh("flush_up_to").await;
    let shard = org(1);
    let ids = backend
        .write(
            &store,
            &[
                update(&shard, 1, 1),
                update(&shard, 2, 2),
                update(&shard, 3, 3),
            ],
        )
        .await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    let drainer = drainer(store.clone(), &recorder, &clock, DrainConfig::default());
    let report = drainer.drain_shard(&shard, Some(ids[1])).await.unwrap();
    assert_eq!(report.deliveries, 2);
    let delivered: Vec<(i64, bool)> = recorder
        .deliveries()
        .iter()
        .map(|d| (d.object, d.synchronous))
        .collect();
    assert_eq!(delivered, vec![(1, true), (2, true)]);
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 1);
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(recorder.deliveries()[2].object, 3);
    assert!(!recorder.deliveries()[2].synchronous);
}
