//! The synchronous flush claimed before the commit
//! ([`Drainer::prepare_flush`](outbox_core::Drainer::prepare_flush)): a request
//! claims the buckets of the shards it wrote inside its own transaction,
//! just before its `COMMIT`, delivers right after it, and leaves the delete
//! and release to its drainer's completer. Rule 3 holds against it (a
//! drain neither waits for the open claim nor takes its shards; a held
//! bucket is never waited for), a rollback takes the claim back at once,
//! and rule 6 covers its batched completion (lost, the rows are delivered
//! again once the lease ends).
//!
//! Where one transaction writes at a time (SQLite,
//! [`Backend::concurrent_writers`] `false`), what needs another writer
//! while the request's transaction is open runs right after its commit
//! instead: the same race, one step later.

use std::future::Future;
use std::time::Duration;

use super::{drainer, org, update, v, Backend, WriterTransaction};
use crate::Recorder;
use outbox_core::clock::ManualClock;
use outbox_core::drain::{DrainConfig, DrainReport, FlushError};
use outbox_core::shard::{OutboxKind, CLAIM_BUCKETS};
use outbox_core::store::StoreAdmin;

/// How long a step that must not wait for anyone may take before the test
/// says it waited: far more than it takes, far less than forever.
const AT_ONCE: Duration = Duration::from_secs(10);

/// A lease that no heartbeat needs to renew while a test holds a receiver
/// (the [`ManualClock`] ends it when the test says so).
const LONG_LEASE: Duration = Duration::from_secs(600);

/// `step`, which must not wait for a lock or a lease: panics, saying `what`
/// waited, if it takes longer than [`AT_ONCE`].
async fn at_once<T>(what: &str, step: impl Future<Output = T>) -> T {
    match tokio::time::timeout(AT_ONCE, step).await {
        Ok(done) => done,
        Err(_) => panic!("{what} waited (more than {AT_ONCE:?}): it must never wait"),
    }
}

/// (object, id, synchronous) of each delivery, in order.
fn shape(recorder: &Recorder<super::OutboxCategory>) -> Vec<(i64, i64, bool)> {
    recorder
        .deliveries()
        .iter()
        .map(|d| (d.object, d.id, d.synchronous))
        .collect()
}

/// Begins a writer's transaction and writes `rows` in it.
async fn begin_with<B: Backend>(
    backend: &B,
    store: &B::Store,
    rows: &[super::NewRow],
) -> (Box<dyn WriterTransaction>, Vec<i64>) {
    let mut txn = backend.begin(store).await;
    let ids = txn.write(rows).await;
    (txn, ids)
}

/// A request claims its shard inside its open transaction, where the shard
/// has an older committed row too. A drain on another connection, during
/// the open transaction (where other writers can run; after its commit
/// everywhere), neither waits for the claim nor takes the shard, and
/// delivers a row of another shard in another bucket. After the commit the
/// flush delivers the shard's rows, older first, synchronously; once its
/// completion settled nothing is pending, and every row was delivered
/// exactly once.
pub async fn a_claim_before_the_commit_is_neither_waited_for_nor_taken_by_a_drain<B: Backend>(
    backend: &B,
) {
    let store = backend.fresh("flush_claim_vs_drain").await;
    let (shard, elsewhere) = (org(1), org(2));
    assert_ne!(shard.bucket(), elsewhere.bucket());
    let older = backend
        .write(&store, &[update(&shard, 1, 1), update(&elsewhere, 3, 3)])
        .await;
    let clock = ManualClock::starting_now();
    let config = DrainConfig::default();
    let flushed = Recorder::new();
    let flusher = drainer(store.clone(), &flushed, &clock, config);
    let drained = Recorder::new();
    let background = drainer(backend.reconnect(&store).await, &drained, &clock, config);

    let (txn, ids) = begin_with(backend, &store, &[update(&shard, 2, 2)]).await;
    let mut flush = flusher.prepare_flush([(shard.clone(), ids[0])]);
    at_once("the claim before the commit", flush.claim(&*txn))
        .await
        .unwrap();
    assert!(flush.is_claimed());
    if backend.concurrent_writers() {
        let report = at_once(
            "a drain while a request's claim before its commit is open",
            background.drain_due(OutboxKind::Region),
        )
        .await
        .unwrap_or_else(|error| {
            panic!(
                "a drain while a request's claim before its commit is open failed: {error} \
                 (if this backend writes one transaction at a time, its \
                 `Backend::concurrent_writers` must say so)"
            )
        });
        assert_eq!(
            report.deliveries, 1,
            "the drain delivers the other bucket's row"
        );
    }
    txn.commit().await;
    // Committed, not delivered yet: the lease is the flush's.
    at_once(
        "a drain after the request's commit",
        background.drain_due(OutboxKind::Region),
    )
    .await
    .unwrap();
    assert_eq!(
        shape(&drained),
        vec![(3, older[1], false)],
        "the drain delivered the other bucket's row, and nothing of the claimed shard"
    );

    let outcome = flush.deliver().await;
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    assert_eq!(outcome.report.deliveries, 2);
    assert_eq!(
        shape(&flushed),
        vec![(1, older[0], true), (2, ids[0], true)],
        "the flush delivers its shard, older rows first"
    );
    flusher.settled().await;
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
    let report = background.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 0);
    assert_eq!((flushed.calls(), drained.calls()), (2, 1), "each row once");
}

/// A request claims its shard before its commit, then rolls back: no row
/// is left, nothing is delivered, and the bucket is free at once. Another
/// request's transaction (begun while the first was still open, where other
/// writers can run) writes that shard and another shard of the same bucket,
/// and its claim takes both without waiting for any lease to end (a held
/// bucket would be reported busy: the clock never moves), and delivers
/// exactly its own rows.
pub async fn a_request_that_rolls_back_after_its_claim_leaves_its_bucket_free<B: Backend>(
    backend: &B,
) {
    let store = backend.fresh("flush_rollback").await;
    let (shard, neighbour) = (org(5), org(5 + i64::from(CLAIM_BUCKETS)));
    assert_eq!(shard.bucket(), neighbour.bucket());
    let clock = ManualClock::starting_now();
    let config = DrainConfig::default();
    let recorder = Recorder::new();
    let flusher = drainer(store.clone(), &recorder, &clock, config);

    let (first, ids) = begin_with(backend, &store, &[update(&shard, 1, 1)]).await;
    let mut flush = flusher.prepare_flush([(shard.clone(), ids[0])]);
    at_once("the claim before the commit", flush.claim(&*first))
        .await
        .unwrap();
    // The second writer writes the neighbour while the first is open (a
    // writer of the same shard would wait for the first one's end: rule
    // 11), then the shard.
    let mut second = None;
    if backend.concurrent_writers() {
        second = Some(begin_with(backend, &store, &[update(&neighbour, 3, 3)]).await);
    }
    first.rollback().await;
    // What an application does when its transaction rolled back.
    drop(flush);
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
    assert_eq!(recorder.calls(), 0, "nothing delivered");

    let (mut second, neighbour_ids) = match second {
        Some(open) => open,
        None => begin_with(backend, &store, &[update(&neighbour, 3, 3)]).await,
    };
    let ids = second.write(&[update(&shard, 2, 2)]).await;
    let mut flush = flusher.prepare_flush([
        (shard.clone(), ids[0]),
        (neighbour.clone(), neighbour_ids[0]),
    ]);
    flush.leave_held_to_background();
    at_once("the claim after a rollback", flush.claim(&*second))
        .await
        .unwrap();
    second.commit().await;
    let outcome = at_once("the flush", flush.deliver()).await;
    assert!(
        outcome.errors.is_empty(),
        "the rolled-back claim still held the bucket: {:?}",
        outcome.errors
    );
    assert_eq!(outcome.report.deliveries, 2);
    let mut delivered = shape(&recorder);
    delivered.sort_unstable();
    assert_eq!(
        delivered,
        vec![(2, ids[0], true), (3, neighbour_ids[0], true)]
    );
    flusher.settled().await;
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

/// A flush delivers the rows it claimed before its commit, then its process
/// dies before the batched completion lands (its first receiver call
/// outlives the lease: the second is not made, and the completion is
/// fenced): the claim is reported lost, and the rows stay pending. While
/// the lease lasts another process's drain takes nothing; once it ended,
/// that drain delivers the rows again; then nothing is pending.
pub async fn a_flush_whose_completion_is_lost_is_delivered_again_once_its_lease_ends<B: Backend>(
    backend: &B,
) {
    let store = backend.fresh("flush_completion_lost").await;
    let shard = org(1);
    let clock = ManualClock::starting_now();
    let config = DrainConfig::default().lease(LONG_LEASE);
    let flushed = Recorder::new();
    let gate = flushed.hold_when(|_| true);
    let flusher = drainer(store.clone(), &flushed, &clock, config);
    let redelivered = Recorder::new();
    let other = drainer(
        backend.reconnect(&store).await,
        &redelivered,
        &clock,
        config,
    );

    let (txn, ids) = begin_with(
        backend,
        &store,
        &[update(&shard, 1, 1), update(&shard, 2, 2)],
    )
    .await;
    let mut flush = flusher.prepare_flush([(shard.clone(), ids[1])]);
    flush.claim(&*txn).await.unwrap();
    txn.commit().await;
    let delivering = tokio::spawn(flush.deliver());
    gate.reached(1).await;
    let report = other.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 0, "the flush's lease holds the shard");
    // The receiver outlives the lease: the completion will be fenced.
    clock.advance(config.lease_duration());
    gate.open();
    let outcome = delivering.await.unwrap();
    // The second group is not sent: by the flusher's own clock its lease
    // has ended (rule 12, the sender's half), and the flush says so.
    assert!(
        matches!(&outcome.errors[..], [outbox_core::FlushError::ClaimLost { shard: lost }] if *lost == shard),
        "{:?}",
        outcome.errors
    );
    assert_eq!(outcome.report.deliveries, 1);
    assert_eq!(flushed.calls(), 1, "no receiver call after the lease ended");
    flusher.settled().await;
    assert_eq!(
        store.pending_count(OutboxKind::Region).await.unwrap(),
        2,
        "a fenced completion deletes nothing"
    );

    let report = other.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 2);
    assert_eq!(
        shape(&redelivered),
        vec![(1, ids[0], false), (2, ids[1], false)]
    );
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
    let report = other.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 0);
    assert_eq!(
        (flushed.calls(), redelivered.calls()),
        (1, 2),
        "the first group delivered twice, the second once"
    );
}

/// While a background round delivers a shard, a request writes that shard
/// and claims before its commit with
/// [`leave_held_to_background`](outbox_core::PreparedFlush::leave_held_to_background):
/// its flush reports [`FlushError::ShardBusy`] at once (its `sync_wait` is
/// an hour), delivers nothing and waits for nothing. Once the round
/// released the bucket, the next drain delivers the request's row.
pub async fn a_flush_whose_shard_is_held_leaves_it_to_the_background_at_once<B: Backend>(
    backend: &B,
) {
    let shard = org(1);
    let held = HeldElsewhere::start(backend, "flush_held", &shard).await;
    let (flush, id) = held.claim_held(backend, &shard).await;
    let outcome = at_once("a flush of a held shard", flush.deliver()).await;
    assert_busy_at_once(&outcome, &shard);
    assert_eq!(held.flushed.calls(), 0, "the flush delivered nothing");
    held.finish(id).await;
}

/// Another process's round holding a shard's bucket (its receiver waits at
/// a gate for the shard's first row, object 1), and a flusher of this
/// process with an hour of `sync_wait`.
struct HeldElsewhere<B: Backend> {
    store: B::Store,
    first: i64,
    holder: outbox_core::Drainer<super::OutboxCategory>,
    round: tokio::task::JoinHandle<DrainReport>,
    gate: crate::Gate,
    drained: Recorder<super::OutboxCategory>,
    flusher: outbox_core::Drainer<super::OutboxCategory>,
    flushed: Recorder<super::OutboxCategory>,
}

impl<B: Backend> HeldElsewhere<B> {
    async fn start(backend: &B, label: &str, shard: &outbox_core::ShardKey) -> Self {
        let store = backend.fresh(label).await;
        let first = backend.write(&store, &[update(shard, 1, 1)]).await[0];
        let clock = ManualClock::starting_now();
        let config = DrainConfig::default().lease(LONG_LEASE);
        let drained = Recorder::new();
        let gate = drained.hold_when(|message| message.object_identifier == 1);
        let holder = drainer(store.clone(), &drained, &clock, config);
        let round = tokio::spawn({
            let holder = holder.clone();
            async move { holder.drain_due(OutboxKind::Region).await.unwrap() }
        });
        gate.reached(1).await;
        let flushed = Recorder::new();
        let flusher = drainer(
            backend.reconnect(&store).await,
            &flushed,
            &clock,
            config.sync_wait(Duration::from_secs(3600)),
        );
        Self {
            store,
            first,
            holder,
            round,
            gate,
            drained,
            flusher,
            flushed,
        }
    }

    /// A request of the flushing process that writes `shard`'s row
    /// (object 2), claims it before its commit (held: left to the
    /// background, at once) and commits; the flush and the row's id.
    async fn claim_held(
        &self,
        backend: &B,
        shard: &outbox_core::ShardKey,
    ) -> (outbox_core::PreparedFlush<super::OutboxCategory>, i64) {
        let (txn, ids) = begin_with(backend, &self.store, &[update(shard, 2, 2)]).await;
        let mut flush = self.flusher.prepare_flush([(shard.clone(), ids[0])]);
        flush.leave_held_to_background();
        at_once("the claim of a held shard", flush.claim(&*txn))
            .await
            .unwrap();
        txn.commit().await;
        (flush, ids[0])
    }

    /// Lets the round end; the next drain delivers the row `left` (object
    /// 2) that a flush left to it; then nothing is pending.
    async fn finish(self, left: i64) {
        self.gate.open();
        let report: DrainReport = self.round.await.unwrap();
        assert_eq!(report.deliveries, 1);
        let report = self.holder.drain_due(OutboxKind::Region).await.unwrap();
        assert_eq!(report.deliveries, 1);
        assert_eq!(
            shape(&self.drained),
            vec![(1, self.first, false), (2, left, false)]
        );
        self.flusher.settled().await;
        assert_eq!(
            self.store.pending_count(OutboxKind::Region).await.unwrap(),
            0
        );
    }
}

/// The flush delivered nothing and reported `shard` busy, without waiting.
fn assert_busy_at_once(outcome: &outbox_core::FlushOutcome, shard: &outbox_core::ShardKey) {
    assert_eq!(outcome.report.deliveries, 0);
    match outcome.errors.as_slice() {
        [FlushError::ShardBusy {
            shard: busy,
            waited,
        }] => {
            assert_eq!(busy, shard);
            assert_eq!(*waited, Duration::ZERO);
        }
        other => panic!("expected the shard to be busy, got {other:?}"),
    }
}

/// A shard has older rows, committed earlier and still pending, and a
/// request writes one more: its flush delivers the older rows first, in id
/// order, then its own (a later update of an older object stays in that
/// object's group, which goes at its lowest id, with the newest payload).
/// A row of another shard committed before is left to the background drain.
pub async fn a_flush_delivers_the_older_rows_of_its_shard_first<B: Backend>(backend: &B) {
    let store = backend.fresh("flush_older_first").await;
    let (shard, elsewhere) = (org(1), org(2));
    let older = backend
        .write(
            &store,
            &[
                update(&shard, 1, 1),
                update(&elsewhere, 9, 9),
                update(&shard, 2, 2),
            ],
        )
        .await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    let flusher = drainer(store.clone(), &recorder, &clock, DrainConfig::default());

    let (txn, ids) = begin_with(
        backend,
        &store,
        &[update(&shard, 3, 3), update(&shard, 1, 4)],
    )
    .await;
    let mut flush = flusher.prepare_flush([(shard.clone(), ids[1])]);
    flush.claim(&*txn).await.unwrap();
    txn.commit().await;
    let outcome = flush.deliver().await;
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    let delivered: Vec<(i64, i64, i64, i64, usize, bool)> = recorder
        .deliveries()
        .iter()
        .map(|d| {
            (
                d.object,
                d.first_id,
                d.id,
                v(&d.payload),
                d.coalesced,
                d.synchronous,
            )
        })
        .collect();
    assert_eq!(
        delivered,
        vec![
            (1, older[0], ids[1], 4, 2, true),
            (2, older[2], older[2], 2, 1, true),
            (3, ids[0], ids[0], 3, 1, true),
        ]
    );
    flusher.settled().await;
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 1);
    flusher.drain_due(OutboxKind::Region).await.unwrap();
    let last = recorder.deliveries().pop().unwrap();
    assert_eq!(
        (last.shard, last.id, last.synchronous),
        (elsewhere, older[1], false)
    );
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

/// Another process holds a shard's bucket (its round delivers it); a request
/// writes that shard and claims before its commit, finds the bucket held,
/// and meanwhile another request of the same process, on a shard of
/// another bucket, is flushed and completed. The first flush still reports
/// [`FlushError::ShardBusy`] at once: what this process released says
/// nothing of a bucket another process holds (waiting up to `sync_wait`
/// for that lease would stall the request behind a frozen or slow
/// process).
pub async fn a_flush_waits_for_no_bucket_held_elsewhere_when_other_buckets_were_released<
    B: Backend,
>(
    backend: &B,
) {
    let shard = org(1);
    let elsewhere = org(2);
    assert_ne!(shard.bucket(), elsewhere.bucket());
    let held_elsewhere = HeldElsewhere::start(backend, "flush_held_elsewhere", &shard).await;
    let (held, id) = held_elsewhere.claim_held(backend, &shard).await;
    let HeldElsewhere {
        ref store,
        ref flusher,
        ref flushed,
        ..
    } = held_elsewhere;

    // Another request of this process, flushed and completed meanwhile.
    let (txn, other_ids) = begin_with(backend, store, &[update(&elsewhere, 3, 3)]).await;
    let mut other = flusher.prepare_flush([(elsewhere.clone(), other_ids[0])]);
    other.leave_held_to_background();
    other.claim(&*txn).await.unwrap();
    txn.commit().await;
    let outcome = at_once("a flush of a free shard", other.deliver()).await;
    assert_eq!((outcome.report.deliveries, outcome.errors.len()), (1, 0));
    flusher.settled().await;

    let outcome = at_once(
        "a flush of a shard held elsewhere, after this process released another bucket",
        held.deliver(),
    )
    .await;
    assert_busy_at_once(&outcome, &shard);
    assert_eq!(shape(flushed), vec![(3, other_ids[0], true)]);
    held_elsewhere.finish(id).await;
}
