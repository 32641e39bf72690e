//! Rule 3 with batch receivers (`Receivers::on_batch`): many shards in one
//! call, never two messages of one shard at once, each shard in order; a
//! failure in the middle of a batch holds its own shard and no other.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::{org, update, v, webhook, Backend, NewRow, OutboxCategory};
use crate::{Delivery, Recorder};
use outbox_core::clock::ManualClock;
use outbox_core::drain::{DrainConfig, Drainer};
use outbox_core::receiver::Receivers;
use outbox_core::shard::{OutboxKind, ShardKey};

/// Versions delivered per shard, in delivery order.
fn per_shard(deliveries: &[Delivery<OutboxCategory>]) -> HashMap<ShardKey, Vec<i64>> {
    let mut shards: HashMap<ShardKey, Vec<i64>> = HashMap::new();
    for delivery in deliveries {
        shards
            .entry(delivery.shard.clone())
            .or_default()
            .push(v(&delivery.payload));
    }
    shards
}

/// Webhooks of versions 1 to `versions` for every shard, version by version
/// (no coalescing: each is its own object).
fn webhooks(shards: &[ShardKey], versions: i64) -> Vec<NewRow> {
    (1..=versions)
        .flat_map(|version| {
            shards
                .iter()
                .map(move |shard| webhook(shard, version, version))
        })
        .collect()
}

fn batched_drainer<B: Backend>(
    store: B::Store,
    receivers: Receivers<OutboxCategory>,
    clock: &ManualClock,
) -> Drainer<OutboxCategory> {
    Drainer::builder(store, receivers)
        .clock(clock.clone())
        .config(DrainConfig::default())
        .build()
}

/// Six shards of five webhooks each (no coalescing), one round: the batch
/// receiver is called wave after wave, each batch with at most one message
/// per shard, and every shard's messages arrive once each, in order.
pub async fn a_batch_receiver_gets_each_shard_in_order_one_message_at_a_time<B: Backend>(
    backend: &B,
) {
    let store = backend.fresh("batch_order").await;
    let shards: Vec<ShardKey> = (1..=6).map(org).collect();
    backend.write(&store, &webhooks(&shards, 5)).await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    let receivers = recorder.batch_receivers(&[OutboxCategory::OrganizationWebhook]);
    let drainer = batched_drainer::<B>(store.clone(), receivers, &clock);

    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(report.deliveries, 30);
    let batches = recorder.batches();
    for batch in &batches {
        let distinct: HashSet<&ShardKey> = batch.iter().collect();
        assert_eq!(
            distinct.len(),
            batch.len(),
            "one message per shard: {batch:?}"
        );
    }
    assert_eq!(batches.len(), 5, "five waves of six shards: {batches:?}");
    assert_eq!(recorder.overlaps(), 0);
    for (shard, versions) in per_shard(&recorder.deliveries()) {
        assert_eq!(versions, vec![1, 2, 3, 4, 5], "{shard}");
    }
}

/// A round of 80 shards of three webhooks each: its shards are split into
/// two groups whose waves run concurrently (`drain/wave.rs`), each shard in
/// one group only: six batches of 40, never two messages of one shard at
/// once, every shard in order.
pub async fn a_round_of_many_shards_is_delivered_in_two_wave_groups_each_in_order<B: Backend>(
    backend: &B,
) {
    let store = backend.fresh("batch_groups").await;
    let shards: Vec<ShardKey> = (1..=80).map(org).collect();
    backend.write(&store, &webhooks(&shards, 3)).await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    // Each call yields inside, so that the groups' calls interleave.
    recorder.yield_inside(true);
    let receivers = recorder.batch_receivers(&[OutboxCategory::OrganizationWebhook]);
    let drainer = batched_drainer::<B>(store.clone(), receivers, &clock);

    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(report.deliveries, 240);
    let batches = recorder.batches();
    let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![40; 6], "two groups of three waves");
    // Each group's waves carry the same shards; the two groups share none.
    let mut groups: Vec<HashSet<&ShardKey>> = Vec::new();
    for batch in &batches {
        let distinct: HashSet<&ShardKey> = batch.iter().collect();
        assert_eq!(distinct.len(), batch.len(), "one message per shard");
        if !groups.contains(&distinct) {
            groups.push(distinct);
        }
    }
    assert_eq!(groups.len(), 2, "a shard in two groups: {groups:?}");
    assert!(groups[0].is_disjoint(&groups[1]));
    assert_eq!(recorder.overlaps(), 0);
    for (shard, versions) in per_shard(&recorder.deliveries()) {
        assert_eq!(versions, vec![1, 2, 3], "{shard}");
    }
}

/// One shard's third message fails inside a batch: the other shards go on
/// to their end; the failing shard delivers nothing after it until its
/// backoff ends, then the rest in order, each message once.
pub async fn a_failure_in_the_middle_of_a_batch_holds_its_shard_and_no_other<B: Backend>(
    backend: &B,
) {
    let store = backend.fresh("batch_failure").await;
    let (failing, others) = (org(1), [org(2), org(3)]);
    let mut rows = Vec::new();
    for version in 1..=5 {
        rows.push(webhook(&failing, version, version));
        for shard in &others {
            rows.push(webhook(shard, version, version));
        }
    }
    backend.write(&store, &rows).await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    let refused = failing.clone();
    recorder.fail_when(move |message| {
        message.shard == refused
            && message
                .payload
                .as_ref()
                .is_some_and(|p| p.to_value_or_text()["v"] == 3)
    });
    let receivers = recorder.batch_receivers(&[OutboxCategory::OrganizationWebhook]);
    let drainer = batched_drainer::<B>(store.clone(), receivers, &clock);

    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
    assert_eq!(report.deliveries, 2 + 2 * 5);
    let delivered = per_shard(&recorder.deliveries());
    assert_eq!(delivered[&failing], vec![1, 2], "nothing after the failure");
    for shard in &others {
        assert_eq!(delivered[shard], vec![1, 2, 3, 4, 5], "{shard}");
    }

    // Still backing off: nothing; once it ends, the rest in order.
    assert_eq!(
        drainer
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .deliveries,
        0
    );
    recorder.stop_failing();
    clock.advance(Duration::from_secs(1));
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let delivered = per_shard(&recorder.deliveries());
    assert_eq!(delivered[&failing], vec![1, 2, 3, 4, 5]);
    assert_eq!(recorder.overlaps(), 0);
}

/// A shard that mixes a batched category with a single-message one keeps
/// its order across both, through the background drain and a synchronous
/// flush alike.
pub async fn a_shard_mixing_batch_and_single_receivers_keeps_its_order<B: Backend>(backend: &B) {
    let store = backend.fresh("batch_mixed").await;
    let shards = [org(1), org(2)];
    let mut rows = Vec::new();
    for version in 1..=6 {
        for shard in &shards {
            rows.push(if version % 2 == 0 {
                webhook(shard, 100 + version, version)
            } else {
                update(shard, 100 + version, version)
            });
        }
    }
    backend.write(&store, &rows).await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    let receivers = recorder.batch_receivers(&[OutboxCategory::OrganizationWebhook]);
    let drainer = batched_drainer::<B>(store.clone(), receivers, &clock);
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(report.deliveries, 12);
    for (shard, versions) in per_shard(&recorder.deliveries()) {
        assert_eq!(versions, (1..=6).collect::<Vec<_>>(), "{shard}");
    }
    assert!(!recorder.batches().is_empty());

    // A flush of a batched category.
    let ids = backend.write(&store, &[webhook(&shards[0], 7, 7)]).await;
    let report = drainer.drain_shard(&shards[0], Some(ids[0])).await.unwrap();
    assert_eq!(report.deliveries, 1);
    assert_eq!(
        per_shard(&recorder.deliveries())[&shards[0]].last(),
        Some(&7)
    );
    assert_eq!(recorder.overlaps(), 0);
}

/// A batch handler that answers fewer results than messages, or panics,
/// fails the messages without a result (transient): nothing is lost, and
/// they are delivered once the handler behaves.
pub async fn a_batch_handler_that_answers_short_or_panics_loses_nothing<B: Backend>(backend: &B) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let store = backend.fresh("batch_short").await;
    let shards: Vec<ShardKey> = (1..=3).map(org).collect();
    let rows: Vec<NewRow> = shards.iter().map(|shard| webhook(shard, 1, 1)).collect();
    backend.write(&store, &rows).await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut receivers = recorder.receivers();
    let (inner, counter) = (recorder.clone(), calls.clone());
    receivers = receivers.on_batch(OutboxCategory::OrganizationWebhook, move |batch| {
        let (recorder, call) = (inner.clone(), counter.fetch_add(1, Ordering::SeqCst));
        async move {
            match call {
                // First call: answers for the first message only.
                0 => {
                    let first = batch.into_iter().take(1).collect();
                    recorder.handle_batch(first).await
                }
                1 => panic!("the batch handler fell over"),
                _ => recorder.handle_batch(batch).await,
            }
        }
    });
    let drainer = batched_drainer::<B>(store.clone(), receivers, &clock);
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.deliveries, report.failures.len()), (1, 2));
    assert!(
        report.failures.iter().all(|failure| failure
            .error
            .to_string()
            .contains("answered 1 results for 3 messages")),
        "{:?}",
        report.failures
    );
    clock.advance(Duration::from_secs(1));
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.deliveries, report.failures.len()), (0, 2));
    assert!(report.failures[0].error.to_string().contains("fell over"));
    clock.advance(Duration::from_secs(2));
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.deliveries, report.failures.len()), (2, 0));
    let delivered: Vec<ShardKey> = recorder.deliveries().into_iter().map(|d| d.shard).collect();
    let distinct: HashSet<ShardKey> = delivered.iter().cloned().collect();
    assert_eq!((delivered.len(), distinct.len()), (3, 3), "each once");
}
