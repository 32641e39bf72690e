//! Rule 4: a delivery carries the payload of its group's highest id; after
//! success every row of the group at or below it is deleted, and rows that
//! arrived meanwhile stay for the next round. A category declared
//! `(no_coalesce)` delivers every row, one by one, in order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::{drainer, org, update, v, webhook, Backend, OutboxCategory};
use crate::Recorder;
use outbox_core::clock::ManualClock;
use outbox_core::drain::DrainConfig;
use outbox_core::shard::{OutboxKind, ShardKey};
use outbox_core::store::StoreAdmin;

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

/// Five webhooks about one object are five deliveries, in the order written,
/// each acknowledging its own row, while five updates of the same object in
/// between still coalesce into one.
pub async fn a_category_that_does_not_coalesce_delivers_every_row_in_order<B: Backend>(
    backend: &B,
) {
    let store = backend.fresh("no_coalesce").await;
    let shard = org(1);
    let rows: Vec<_> = (0..10)
        .map(|n| {
            if n % 2 == 0 {
                webhook(&shard, 7, n)
            } else {
                update(&shard, 7, n)
            }
        })
        .collect();
    let ids = backend.write(&store, &rows).await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    let drainer = drainer(store.clone(), &recorder, &clock, DrainConfig::default());
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.deliveries, report.rows_deleted), (6, 10));
    let shape: Vec<(OutboxCategory, i64, usize, i64)> = recorder
        .deliveries()
        .iter()
        .map(|d| (d.category, v(&d.payload), d.coalesced, d.id))
        .collect();
    let hook = OutboxCategory::OrganizationWebhook;
    assert_eq!(
        shape,
        vec![
            (hook, 0, 1, ids[0]),
            (OutboxCategory::OrganizationUpdate, 9, 5, ids[9]),
            (hook, 2, 1, ids[2]),
            (hook, 4, 1, ids[4]),
            (hook, 6, 1, ids[6]),
            (hook, 8, 1, ids[8]),
        ]
    );
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

/// Four writers commit webhooks about the same few objects on three shards
/// while two drain loops (other connections: other processes) and a
/// synchronous flush run: every row is delivered once, alone, with its own
/// payload, and each shard delivers each writer's webhooks in the order it
/// committed them.
pub async fn concurrent_writes_of_a_category_that_does_not_coalesce_are_each_delivered<
    B: Backend,
>(
    backend: &B,
) {
    const WRITERS: i64 = 4;
    const WRITES: i64 = 30;
    let store = backend.fresh("no_coalesce_concurrent").await;
    let shards = [org(1), org(2), org(3)];
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    recorder.yield_inside(true);
    let config = DrainConfig::default().batch_size(7);
    let writing = Arc::new(AtomicBool::new(true));
    let mut drains = Vec::new();
    for _ in 0..2 {
        let drainer = drainer(backend.reconnect(&store).await, &recorder, &clock, config);
        let (store, writing) = (store.clone(), writing.clone());
        drains.push(tokio::spawn(async move {
            loop {
                let done = !writing.load(Ordering::SeqCst);
                drainer.drain_due(OutboxKind::Region).await.unwrap();
                if done && store.pending_count(OutboxKind::Region).await.unwrap() == 0 {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }));
    }
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let (backend, store, shards) = (backend.clone(), store.clone(), shards.clone());
        let flusher = drainer(backend.reconnect(&store).await, &recorder, &clock, config);
        writers.push(tokio::spawn(async move {
            let mut written = Vec::new();
            for n in 0..WRITES {
                let shard = &shards[((writer + n) % 3) as usize];
                // Two objects only: a coalescing category would fold these.
                let v = writer * 1000 + n;
                let id = backend.write(&store, &[webhook(shard, n % 2, v)]).await[0];
                if n % 5 == 0 {
                    // A request's flush after its commit, racing the drains.
                    let _ = flusher.drain_shard(shard, Some(id)).await;
                }
                written.push((id, v));
                tokio::task::yield_now().await;
            }
            written
        }));
    }
    let mut written: HashMap<i64, i64> = HashMap::new();
    for writer in writers {
        written.extend(writer.await.unwrap());
    }
    writing.store(false, Ordering::SeqCst);
    for drain in drains {
        drain.await.unwrap();
    }

    let deliveries = recorder.deliveries();
    assert_eq!(
        recorder.overlaps(),
        0,
        "a shard was delivered twice at once"
    );
    assert!(
        deliveries
            .iter()
            .all(|d| d.coalesced == 1 && d.first_id == d.id),
        "a webhook was coalesced"
    );
    let mut delivered: Vec<(i64, i64)> = deliveries.iter().map(|d| (d.id, v(&d.payload))).collect();
    delivered.sort_unstable();
    let mut expected: Vec<(i64, i64)> = written.into_iter().collect();
    expected.sort_unstable();
    assert_eq!(delivered.len(), (WRITERS * WRITES) as usize);
    assert_eq!(
        delivered, expected,
        "every write delivered once, with its payload"
    );
    // Writes of one writer commit one after another, so each shard delivers
    // them in that order (two writers' transactions commit in either order).
    let mut last: HashMap<(ShardKey, i64), i64> = HashMap::new();
    for delivery in &deliveries {
        let v = v(&delivery.payload);
        if let Some(previous) = last.insert((delivery.shard.clone(), v / 1000), v) {
            assert!(
                previous < v,
                "{}: writer {}'s webhook {v} delivered after {previous}",
                delivery.shard,
                v / 1000
            );
        }
    }
}

/// 20 shards × 5 objects × 20 updates, written interleaved (consecutive ids
/// cycle through the shards, so that any window of due rows cuts every
/// shard), drained by `drain_due` in a loop with the default configuration:
/// each (shard, object) group is one receiver call, with its newest payload,
/// acknowledging its 20 rows. A deep shard of a full window is read beyond
/// the window, so that the claim never splits a group with the next one.
pub async fn the_groups_of_many_interleaved_shards_are_each_delivered_once<B: Backend>(
    backend: &B,
) {
    const SHARDS: i64 = 20;
    const OBJECTS: i64 = 5;
    const UPDATES: i64 = 20;
    let store = backend.fresh("coalescing_interleaved").await;
    let mut rows = Vec::new();
    for n in 0..UPDATES {
        for object in 0..OBJECTS {
            for shard in 1..=SHARDS {
                rows.push(update(&org(shard), object, n));
            }
        }
    }
    let ids = backend.write(&store, &rows).await;
    // Each group's ids, lowest first.
    let mut groups: HashMap<(ShardKey, i64), Vec<i64>> = HashMap::new();
    for (row, id) in rows.iter().zip(&ids) {
        groups
            .entry((row.shard.clone(), row.object))
            .or_default()
            .push(*id);
    }

    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    let drainer = drainer(store.clone(), &recorder, &clock, DrainConfig::default());
    let mut rounds = 0;
    while store.pending_count(OutboxKind::Region).await.unwrap() > 0 {
        rounds += 1;
        assert!(rounds <= 100, "still pending after 100 rounds");
        drainer.drain_due(OutboxKind::Region).await.unwrap();
    }

    let mut delivered: HashMap<(ShardKey, i64), usize> = HashMap::new();
    for delivery in recorder.deliveries() {
        let key = (delivery.shard.clone(), delivery.object);
        *delivered.entry(key.clone()).or_default() += 1;
        let group = &groups[&key];
        assert_eq!(
            (
                v(&delivery.payload),
                delivery.coalesced,
                delivery.first_id,
                delivery.id
            ),
            (UPDATES - 1, group.len(), group[0], group[group.len() - 1]),
            "object {} of {}: a group split, or not its newest payload",
            key.1,
            key.0
        );
    }
    let split: Vec<_> = delivered.iter().filter(|(_, calls)| **calls > 1).collect();
    assert!(
        split.is_empty(),
        "groups delivered more than once: {split:?}"
    );
    assert_eq!(delivered.len(), groups.len(), "every group delivered");
    assert_eq!(recorder.calls(), (SHARDS * OBJECTS) as usize);
}
