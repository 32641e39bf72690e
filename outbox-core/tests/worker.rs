//! The worker loop over `MemoryStore`: wake-ups, polling when the wake-up
//! source fails, shutdown, and one claim at a time.

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use outbox_core::store::{
    ClaimRequest, CommitBatch, CommitOutcome, DrainStore, DueClaim, ShardClaim, StoreError,
};
use outbox_core::worker::{WakeSource, Wakeup, WorkerBuilder};
use outbox_core::{BoxError, Drainer, DrainerBuilder, MemoryStore, OutboxKind, ShardKey};
use outbox_testing::Recorder;
use tokio::sync::mpsc;

outbox_core::registry! {
    OrgScope = 0 {
        OrgUpdate = 1,
    }
}

fn org(id: i64) -> ShardKey {
    ShardKey::region(OutboxScope::OrgScope, id)
}

/// A source that can never connect.
struct Unreachable;

#[async_trait]
impl WakeSource for Unreachable {
    async fn next(&mut self) -> Result<Wakeup, BoxError> {
        Err("connection refused".into())
    }
}

/// A source fed by the test.
struct Channel(mpsc::UnboundedReceiver<Wakeup>);

#[async_trait]
impl WakeSource for Channel {
    async fn next(&mut self) -> Result<Wakeup, BoxError> {
        match self.0.recv().await {
            Some(wakeup) => Ok(wakeup),
            None => std::future::pending().await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_wake_ups_cannot_arrive_is_ready_and_polls() {
    let store = MemoryStore::new();
    let recorder = Recorder::<OutboxCategory>::new();
    let worker = WorkerBuilder::new(Drainer::new(store.clone(), recorder.receivers()))
        .poll_interval(Duration::from_millis(20))
        .wake_source(Unreachable)
        .spawn();
    // Polling is a working mode: readiness does not wait for the source.
    worker.ready().await;
    store.write(&org(1), OutboxCategory::OrgUpdate, 1, None);
    assert!(recorder.wait_for(1, Duration::from_secs(30)).await);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_from_another_process_wakes_an_idle_worker_at_once() {
    let store = MemoryStore::new();
    let recorder = Recorder::<OutboxCategory>::new();
    let (wake, wakeups) = mpsc::unbounded_channel();
    wake.send(Wakeup::Resync).unwrap(); // connected
    let worker = WorkerBuilder::new(Drainer::new(store.clone(), recorder.receivers()))
        // No poll would come within the test.
        .poll_interval(Duration::from_secs(3600))
        .wake_source(Channel(wakeups))
        .spawn();
    worker.ready().await;
    store.write(&org(1), OutboxCategory::OrgUpdate, 1, None);
    wake.send(Wakeup::Rows(OutboxKind::Region)).unwrap();
    assert!(recorder.wait_for(1, Duration::from_secs(30)).await);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cuts_off_rounds_past_its_bound_and_frees_their_shards() {
    let store = MemoryStore::new();
    let id = store.write(&org(1), OutboxCategory::OrgUpdate, 1, None);
    let stuck = Recorder::<OutboxCategory>::new();
    let gate = stuck.hold_when(|_| true);
    let worker = WorkerBuilder::new(Drainer::new(store.clone(), stuck.receivers()))
        .shutdown_timeout(Duration::from_millis(50))
        .spawn();
    gate.reached(1).await;
    worker.shutdown().await;
    // The cut-off round's claim was ended: another worker takes the shard
    // now, not after the lease.
    let next = Recorder::<OutboxCategory>::new();
    let other = Drainer::new(store.clone(), next.receivers());
    let report = other.drain_shard(&org(1), Some(id)).await.unwrap();
    assert_eq!(report.deliveries, 1);
    assert!(store.rows(OutboxKind::Region).is_empty());
}

/// With each gauge update a worker records its history samples: per table
/// (this process's deliveries since the last sample) and per scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_records_its_history_with_its_gauges() {
    let store = MemoryStore::new();
    for id in [1, 2] {
        store.write(&org(id), OutboxCategory::OrgUpdate, id, None);
    }
    let recorder = Recorder::<OutboxCategory>::new();
    let drainer = Drainer::builder(store.clone(), recorder.receivers())
        .owner("worker-1")
        .build();
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 2);
    // Its own first round finds nothing left: the sample counts the two.
    let worker = WorkerBuilder::new(drainer.clone())
        .poll_interval(Duration::from_secs(3600))
        .gauge_interval(Some(Duration::from_secs(3600)))
        .spawn();
    worker.ready().await;
    let samples = drainer
        .view()
        .history(OutboxKind::Region, Duration::from_secs(3600))
        .await
        .unwrap();
    let table: Vec<_> = samples.iter().filter(|s| s.scope.is_none()).collect();
    assert_eq!(table.len(), 1, "{samples:#?}");
    assert_eq!(table[0].owner, "worker-1");
    assert_eq!(
        table[0].delivered, 2,
        "the deliveries since the drainer began"
    );
    assert_eq!(
        samples
            .iter()
            .filter(|s| s.scope.as_deref() == Some("OrgScope"))
            .count(),
        1
    );
    let control = drainer
        .view()
        .history(OutboxKind::Control, Duration::from_secs(3600))
        .await
        .unwrap();
    assert!(!control.is_empty(), "both tables are sampled");
    worker.shutdown().await;
}

/// Gathering under load (`worker/gather.rs`), on tokio's paused clock: time
/// moves only when every task waits, so "waits out the window" is exact.
#[tokio::test(start_paused = true)]
async fn after_a_claim_of_several_shards_rows_woken_meanwhile_wait_for_one_claim() {
    use tokio::time::Instant;
    let window = Duration::from_secs(10);
    let store = MemoryStore::new();
    let recorder = Recorder::<OutboxCategory>::new();
    let worker = WorkerBuilder::new(Drainer::new(store.clone(), recorder.receivers()))
        .poll_interval(Duration::from_secs(3600))
        .gauge_interval(None)
        .gather(window)
        .spawn();
    worker.ready().await;
    let wake = || worker.waker().wake(OutboxKind::Region);

    // One shard at a time: each delivered at once.
    for lone in 1..=2 {
        store.write(&org(lone), OutboxCategory::OrgUpdate, lone, None);
        let woken = Instant::now();
        wake().await;
        assert!(
            recorder
                .wait_for(lone as usize, Duration::from_secs(60))
                .await
        );
        assert!(woken.elapsed() < window, "a lone row waited for the window");
    }

    // A claim of several shards starts the window.
    let several = outbox_core::worker::GATHER_FROM_SHARDS;
    for org_id in 10..10 + several as i64 {
        store.write(&org(org_id), OutboxCategory::OrgUpdate, org_id, None);
    }
    wake().await;
    let claimed = Instant::now();
    let delivered = 2 + several;
    assert!(recorder.wait_for(delivered, Duration::from_secs(60)).await);

    // Rows woken within it wait for its end, then go to one claim.
    store.write(&org(100), OutboxCategory::OrgUpdate, 100, None);
    wake().await;
    // Paused time advances only once the worker waits (for the window).
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(recorder.calls(), delivered, "claimed within the window");
    store.write(&org(101), OutboxCategory::OrgUpdate, 101, None);
    wake().await;
    assert!(
        recorder
            .wait_for(delivered + 2, Duration::from_secs(60))
            .await
    );
    assert!(
        claimed.elapsed() >= window,
        "claimed before the window ended"
    );
    let fences: Vec<_> = recorder.deliveries()[delivered..]
        .iter()
        .map(|delivery| delivery.fence)
        .collect();
    assert_eq!(fences[0], fences[1], "the gathered rows took two claims");
    worker.shutdown().await;
}

/// Rows passed over because another round of the worker held their bucket
/// are claimed when that round ends, not at the next poll: here a round
/// whose claim took everything it saw (so it wakes nobody as it releases
/// its bucket) holds the bucket of a row written after its claim. On tokio's
/// paused clock a wait for the poll interval would be a jump of an hour.
#[tokio::test(start_paused = true)]
async fn rows_passed_over_in_a_held_bucket_are_claimed_when_the_holder_ends() {
    use tokio::time::Instant;
    let poll = Duration::from_secs(3600);
    let store = MemoryStore::new();
    let recorder = Recorder::<OutboxCategory>::new();
    let gate = recorder.hold_when(|message| message.shard_identifier() == 1);
    store.write(&org(1), OutboxCategory::OrgUpdate, 1, None);
    let worker = WorkerBuilder::new(Drainer::new(store.clone(), recorder.receivers()))
        .poll_interval(poll)
        .gauge_interval(None)
        .spawn();
    // The first round holds org 1's bucket while its receiver waits.
    gate.reached(1).await;

    // A row of another shard of that bucket, written after the first
    // round's claim: the claim it wakes passes it over.
    let neighbour = org(1 + i64::from(outbox_core::shard::CLAIM_BUCKETS));
    assert_eq!(neighbour.bucket(), org(1).bucket());
    store.write(&neighbour, OutboxCategory::OrgUpdate, 2, None);
    worker.waker().wake(OutboxKind::Region).await;
    // Paused time moves only once every task waits: that claim is done.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(recorder.deliveries().is_empty(), "the bucket was held");

    let released = Instant::now();
    gate.open();
    assert!(recorder.wait_for(2, poll * 2).await);
    // Nothing here waits on the clock: any time passed is the poll's.
    assert!(
        released.elapsed() < Duration::from_secs(1),
        "the passed-over row waited for the poll interval"
    );
    let shards: Vec<_> = recorder
        .deliveries()
        .iter()
        .map(|delivery| delivery.shard.identifier())
        .collect();
    assert_eq!(shards, [1, neighbour.identifier()]);
    worker.shutdown().await;
}

/// A store whose first claim waits until the test lets it go, and which
/// counts the claims in progress at once.
struct SlowFirstClaim {
    inner: MemoryStore,
    started: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Semaphore>,
    claims: AtomicUsize,
    in_progress: AtomicUsize,
    most: Arc<AtomicUsize>,
}

#[async_trait]
impl DrainStore for SlowFirstClaim {
    async fn claim_due(&self, request: &ClaimRequest) -> Result<DueClaim, StoreError> {
        let now = self.in_progress.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        if self.claims.fetch_add(1, Ordering::SeqCst) == 0 {
            self.started.notify_one();
            self.release.acquire().await.unwrap().forget();
        }
        let claim = self.inner.claim_due(request).await;
        self.in_progress.fetch_sub(1, Ordering::SeqCst);
        claim
    }

    async fn claim_shard(
        &self,
        request: &ClaimRequest,
        shard: &ShardKey,
    ) -> Result<ShardClaim, StoreError> {
        self.inner.claim_shard(request, shard).await
    }

    async fn renew(
        &self,
        kind: OutboxKind,
        token: i64,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        self.inner.renew(kind, token, now, until).await
    }

    async fn commit(&self, batch: &CommitBatch) -> Result<CommitOutcome, StoreError> {
        self.inner.commit(batch).await
    }

    async fn expire_claims(
        &self,
        kind: OutboxKind,
        token: i64,
        now: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        self.inner.expire_claims(kind, token, now).await
    }
}

/// The worker never claims beside one of its claims still reading: two at
/// once would read the same rows, and the second would lease none of the
/// buckets the first leases. On tokio's paused clock, time moves on while
/// the first claim waits (a long scan), and the worker waits for it.
#[tokio::test(start_paused = true)]
async fn the_worker_never_claims_beside_its_claim_still_reading() {
    let store = MemoryStore::new();
    for org_id in 0..10 {
        store.write(&org(org_id), OutboxCategory::OrgUpdate, org_id, None);
    }
    let most = Arc::new(AtomicUsize::new(0));
    let slow = SlowFirstClaim {
        inner: store.clone(),
        started: Arc::new(tokio::sync::Notify::new()),
        release: Arc::new(tokio::sync::Semaphore::new(0)),
        claims: AtomicUsize::new(0),
        in_progress: AtomicUsize::new(0),
        most: most.clone(),
    };
    let (started, release) = (slow.started.clone(), slow.release.clone());
    let recorder = Recorder::<OutboxCategory>::new();
    let drainer = DrainerBuilder::from_parts(
        Arc::new(slow),
        Arc::new(store.clone()),
        Arc::new(recorder.receivers()),
    )
    .build();
    let worker = WorkerBuilder::new(drainer)
        .kinds([OutboxKind::Region])
        .poll_interval(Duration::from_secs(3600))
        .gauge_interval(None)
        .spawn();
    started.notified().await;
    // Paused time moves only once every task waits: the worker has had
    // every chance to claim again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(most.load(Ordering::SeqCst), 1, "claims at once");
    release.add_permits(1);
    assert!(recorder.wait_for(10, Duration::from_secs(60)).await);
    worker.shutdown().await;
}

/// `settled` wakes the loops for what is due and returns once it is
/// delivered: no poll (an hour away) and no wake-up from the writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_waits_until_every_due_row_is_delivered() {
    let store = MemoryStore::new();
    let recorder = Recorder::<OutboxCategory>::new();
    let worker = WorkerBuilder::new(Drainer::new(store.clone(), recorder.receivers()))
        .poll_interval(Duration::from_secs(3600))
        .spawn();
    worker.ready().await;
    for id in 0..50 {
        store.write(&org(id % 7), OutboxCategory::OrgUpdate, id, None);
    }
    // A bound against a hang, not a speed: nothing else would wake the loop.
    tokio::time::timeout(Duration::from_secs(60), worker.settled())
        .await
        .expect("settled() woke no loop: the rows wait for an hour's poll")
        .unwrap();
    assert!(store.rows(OutboxKind::Region).is_empty());
    assert_eq!(recorder.deliveries().len(), 50);
    worker.shutdown().await;
}

/// A failing shard backs off: `settled` does not wait for its retry, and
/// a worker told to stop ends the wait with `Stopped`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_leaves_backing_off_shards_and_ends_when_the_worker_stops() {
    let store = MemoryStore::new();
    let recorder = Recorder::<OutboxCategory>::new();
    recorder.fail_when(|_| true);
    let worker = WorkerBuilder::new(Drainer::new(store.clone(), recorder.receivers()))
        .poll_interval(Duration::from_secs(3600))
        .spawn();
    worker.ready().await;
    store.write(&org(1), OutboxCategory::OrgUpdate, 1, None);
    worker.settled().await.unwrap();
    assert_eq!(recorder.calls(), 1, "tried once, then backing off");
    assert_eq!(store.rows(OutboxKind::Region).len(), 1);

    worker.stopping().cancel();
    assert!(matches!(
        worker.settled().await,
        Err(outbox_core::worker::SettleError::Stopped(_))
    ));
    worker.shutdown().await;
}
