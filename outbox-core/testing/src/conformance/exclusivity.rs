//! Rule 3, exclusivity: at most one worker, in any process, works on a shard
//! at a time. The unit of a claim is a bucket of shards: a held bucket holds
//! every shard hashed into it, and only those.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{drainer, org, update, Backend, NewRow};
use crate::Recorder;
use outbox_core::clock::ManualClock;
use outbox_core::drain::{DrainConfig, FlushError};
use outbox_core::shard::{OutboxKind, ShardKey, CLAIM_BUCKETS};
use outbox_core::store::{
    ClaimOrder, ClaimRequest, CommitBatch, DrainStore, ShardClaim, ShardCommit, ShardEnd,
    StoreAdmin,
};

/// Four drain loops over four connections ("processes") and two tasks
/// flushing shards synchronously, over 24 shards of which some share a
/// bucket: no shard is ever delivered by two at once, every row is
/// delivered, and each shard's deliveries stay in id order.
pub async fn concurrent_drains_and_flushes_never_share_a_shard<B: Backend>(backend: &B) {
    let store = backend.fresh("exclusivity").await;
    let bucket = i64::from(CLAIM_BUCKETS);
    // 0, 1024 and 2048 share a bucket, and so on.
    let shards: Vec<ShardKey> = (0..8)
        .flat_map(|n| [org(n), org(n + bucket), org(n + 2 * bucket)])
        .collect();
    let rows: Vec<NewRow> = (0..480)
        .map(|n| update(&shards[n % shards.len()], n as i64, n as i64))
        .collect();
    let ids = backend.write(&store, &rows).await;

    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    recorder.yield_inside(true);
    let config = DrainConfig::default()
        .batch_size(40)
        .concurrency(4)
        .sync_wait(Duration::from_millis(50));
    let done = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for worker in 0..4 {
        let drainer = drainer(backend.reconnect(&store).await, &recorder, &clock, config);
        let (store, done) = (store.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut lost = 0;
            while !done.load(Ordering::SeqCst) {
                let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
                lost += report.lost_claims.len();
                if store.pending_count(OutboxKind::Region).await.unwrap() == 0 {
                    done.store(true, Ordering::SeqCst);
                }
                if report.is_empty() {
                    tokio::task::yield_now().await;
                }
            }
            (worker, lost)
        }));
    }
    for flusher in 0..2 {
        let drainer = drainer(backend.reconnect(&store).await, &recorder, &clock, config);
        let (shards, done) = (shards.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = flusher;
            while !done.load(Ordering::SeqCst) {
                match drainer.drain_shard(&shards[n % shards.len()], None).await {
                    Ok(_) | Err(FlushError::ShardBusy { .. }) => {}
                    Err(error) => panic!("flush failed: {error}"),
                }
                n += 7;
            }
            (4 + flusher, 0)
        }));
    }
    for task in tasks {
        let (worker, lost) = task.await.unwrap();
        assert_eq!(lost, 0, "worker {worker} lost claims");
    }

    assert_eq!(
        recorder.overlaps(),
        0,
        "a shard was delivered twice at once"
    );
    let deliveries = recorder.deliveries();
    let mut delivered: Vec<i64> = deliveries.iter().map(|d| d.id).collect();
    delivered.sort_unstable();
    assert_eq!(delivered, ids, "every row exactly once");
    let mut last: HashMap<ShardKey, i64> = HashMap::new();
    for delivery in &deliveries {
        if let Some(previous) = last.insert(delivery.shard.clone(), delivery.id) {
            assert!(
                previous < delivery.id,
                "{} went back from {previous} to {}",
                delivery.shard,
                delivery.id
            );
        }
    }
}

/// While a round delivers a shard, a flush of another shard of the same
/// bucket waits (and gives up after its bound), and a flush of a shard in
/// another bucket goes through at once.
pub async fn a_held_bucket_blocks_its_shards_and_no_other<B: Backend>(backend: &B) {
    let store = backend.fresh("held_bucket").await;
    let (held, neighbour, elsewhere) = (org(1), org(1 + i64::from(CLAIM_BUCKETS)), org(2));
    assert_eq!(held.bucket(), neighbour.bucket());
    assert_ne!(held.bucket(), elsewhere.bucket());
    backend.write(&store, &[update(&held, 1, 1)]).await;

    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    let gate = recorder.hold_when(|message| message.object_identifier == 1);
    let round = tokio::spawn({
        let drainer = drainer(store.clone(), &recorder, &clock, DrainConfig::default());
        async move { drainer.drain_due(OutboxKind::Region).await.unwrap() }
    });
    gate.reached(1).await;

    let ids = backend
        .write(
            &store,
            &[update(&neighbour, 2, 2), update(&elsewhere, 3, 3)],
        )
        .await;
    let flushes = Recorder::new();
    let config = DrainConfig::default().sync_wait(Duration::from_millis(50));
    let flusher = drainer(backend.reconnect(&store).await, &flushes, &clock, config);
    let error = flusher
        .drain_shard(&neighbour, Some(ids[0]))
        .await
        .unwrap_err();
    assert!(matches!(error, FlushError::ShardBusy { .. }), "{error}");
    let report = flusher.drain_shard(&elsewhere, Some(ids[1])).await.unwrap();
    assert_eq!(report.deliveries, 1);

    gate.open();
    assert_eq!(round.await.unwrap().deliveries, 1);
    let report = flusher.drain_shard(&neighbour, Some(ids[0])).await.unwrap();
    assert_eq!(report.deliveries, 1);
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

/// A commit releases the buckets of the shards it lists, and no other bucket
/// of its claim: a claim's buckets stay leased until a commit lists one of
/// their shards, and are then free for anyone at once.
pub async fn a_commit_releases_the_buckets_of_its_shards_only<B: Backend>(backend: &B) {
    let store = backend.fresh("commit_scope").await;
    let (first, second) = (org(3), org(4));
    assert_ne!(first.bucket(), second.bucket());
    backend
        .write(&store, &[update(&first, 1, 1), update(&second, 2, 2)])
        .await;

    let now = chrono::Utc::now();
    let request = |token: i64| ClaimRequest {
        kind: OutboxKind::Region,
        now,
        lease_until: now + chrono::Duration::seconds(30),
        token,
        owner: format!("conformance-{token}"),
        rows: 100,
        up_to_id: None,
        order: ClaimOrder::Oldest,
        beyond: 0,
        shard_rows: usize::MAX,
        held_rows: 0,
    };
    let claimed = store.claim_due(&request(1)).await.unwrap();
    let mut shards: Vec<ShardKey> = claimed
        .shards
        .iter()
        .map(|shard| shard.shard.clone())
        .collect();
    shards.sort();
    assert_eq!(shards, [first.clone(), second.clone()]);

    let done = |shard: &ShardKey| ShardCommit {
        shard: shard.clone(),
        delete_ids: Vec::new(),
        dead_letters: Vec::new(),
        end: ShardEnd::Done,
    };
    let batch = CommitBatch {
        kind: OutboxKind::Region,
        token: 1,
        now,
        shards: vec![done(&first)],
        in_flight: Vec::new(),
        renew_until: now + chrono::Duration::seconds(30),
    };
    assert!(store.commit(&batch).await.unwrap().lost.is_empty());
    let other = backend.reconnect(&store).await;
    assert!(matches!(
        other.claim_shard(&request(2), &second).await.unwrap(),
        ShardClaim::Held
    ));
    assert!(matches!(
        other.claim_shard(&request(3), &first).await.unwrap(),
        ShardClaim::Claimed(_)
    ));

    let batch = CommitBatch {
        shards: vec![done(&second)],
        ..batch
    };
    assert!(store.commit(&batch).await.unwrap().lost.is_empty());
    assert!(matches!(
        other.claim_shard(&request(4), &second).await.unwrap(),
        ShardClaim::Claimed(_)
    ));
}

/// A claim made while a round of the same drainer still delivers scans past
/// the rows that round holds ([`ClaimRequest::held_rows`]): it finds a full
/// window among the rows after them. Scanning only a quarter more than its
/// window, it would meet the held rows first and take part of a window.
pub async fn a_claim_beside_its_drainers_round_scans_past_the_rows_it_holds<B: Backend>(
    backend: &B,
) {
    let store = backend.fresh("held_rows").await;
    // 768 one-row shards, each in a bucket of its own.
    let rows: Vec<NewRow> = (0..768).map(|n| update(&org(n), n, n)).collect();
    backend.write(&store, &rows).await;

    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    // The first round (the first claim's window: 256 rows, the oldest)
    // waits at the gate while it holds its rows.
    let gate = recorder.hold_when(|message| message.shard.identifier() < 256);
    let drainer = drainer(store.clone(), &recorder, &clock, DrainConfig::default());
    let first = tokio::spawn({
        let drainer = drainer.clone();
        async move { drainer.drain_due(OutboxKind::Region).await.unwrap() }
    });
    gate.reached(1).await;

    // The window doubled after a full one: 512 rows. A scan of 640 would
    // meet the 256 held rows first and find 384 others.
    let second = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(
        second.shards, 512,
        "a claim beside a round holding 256 rows took {} shards",
        second.shards
    );
    gate.open();
    assert_eq!(first.await.unwrap().shards, 256);
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
    assert_eq!(recorder.calls(), 768);
}
