//! Rule 12: every delivery carries a fencing token that only grows per
//! shard, across processes, so that a receiver which keeps the highest one
//! it applied refuses a worker that was paused past its lease.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};

use super::{drainer, org, update, v, Backend, OutboxCategory};
use crate::Recorder;
use outbox_core::clock::ManualClock;
use outbox_core::drain::{DrainConfig, Drainer};
use outbox_core::fence::{FenceBook, Fenced};
use outbox_core::message::Message;
use outbox_core::receiver::Receivers;
use outbox_core::shard::OutboxKind;
use outbox_core::store::StoreAdmin;

/// One shard claimed again and again, by two processes, through every kind
/// of claim (background rounds, a flush claimed after its commit, one
/// claimed before it): each claim's token is higher than the last.
pub async fn fencing_tokens_grow_with_every_claim_of_a_shard<B: Backend>(backend: &B) {
    let store = backend.fresh("fencing_tokens_grow").await;
    let shard = org(1);
    let clock = ManualClock::starting_now();
    let config = DrainConfig::default();
    let recorder = Recorder::new();
    let one = drainer(store.clone(), &recorder, &clock, config);
    let two = drainer(backend.reconnect(&store).await, &recorder, &clock, config);
    for (v, worker) in (1..).zip([&one, &two, &one, &two]) {
        backend.write(&store, &[update(&shard, 1, v)]).await;
        let report = worker.drain_due(OutboxKind::Region).await.unwrap();
        assert_eq!(report.deliveries, 1);
    }
    let ids = backend.write(&store, &[update(&shard, 1, 5)]).await;
    let report = one.drain_shard(&shard, Some(ids[0])).await.unwrap();
    assert_eq!(report.deliveries, 1);
    let mut txn = backend.begin(&store).await;
    let ids = txn.write(&[update(&shard, 1, 6)]).await;
    let mut flush = two.prepare_flush([(shard.clone(), ids[0])]);
    flush.claim(&*txn).await.unwrap();
    txn.commit().await;
    let outcome = flush.deliver().await;
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    two.settled().await;
    backend.write(&store, &[update(&shard, 1, 7)]).await;
    assert_eq!(
        one.drain_due(OutboxKind::Region).await.unwrap().deliveries,
        1
    );

    let deliveries = recorder.deliveries();
    let versions: Vec<i64> = deliveries.iter().map(|d| v(&d.payload)).collect();
    assert_eq!(versions, (1..=7).collect::<Vec<_>>());
    let fences: Vec<i64> = deliveries.iter().map(|d| d.fence.get()).collect();
    assert!(
        fences.windows(2).all(|pair| pair[0] < pair[1]),
        "every claim's token is higher than the one before: {fences:?}"
    );
}

/// A replica of `{object: v}` behind a [`FenceBook`], as a receiver that
/// keeps its state in memory would hold it.
#[derive(Clone, Default)]
struct Replica {
    state: Arc<Mutex<HashMap<i64, i64>>>,
    superseded: Arc<AtomicUsize>,
}

impl Replica {
    fn apply(&self, book: &FenceBook, message: &Message<OutboxCategory>) {
        let fenced = book.apply(message, || {
            self.state.lock().unwrap().insert(
                message.object_identifier,
                v(&message
                    .payload
                    .as_ref()
                    .map(outbox_core::Payload::to_value_or_text)),
            );
        });
        if let Fenced::Superseded { .. } = fenced {
            self.superseded.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn get(&self, object: i64) -> Option<i64> {
        self.state.lock().unwrap().get(&object).copied()
    }
}

/// A worker reads version 1 and calls its receiver, which stalls before it
/// applies anything (a process paused between its lease check and the
/// write: no timer of the engine can stop it). The lease ends; version 2 is
/// written and another worker delivers it. The stalled call then resumes:
/// the fenced receiver refuses it as superseded, and the replica keeps
/// version 2. Without tokens that grow, version 1 would be put back and stay
/// (nothing is pending any more to repair it).
pub async fn a_worker_paused_past_its_lease_is_refused_by_a_fenced_receiver<B: Backend>(
    backend: &B,
) {
    let store = backend.fresh("fencing_tokens_paused").await;
    let shard = org(1);
    backend.write(&store, &[update(&shard, 1, 1)]).await;
    let clock = ManualClock::starting_now();
    let config = DrainConfig::default();
    let book = FenceBook::new("replica");
    let replica = Replica::default();

    let (entered, mut stalled) = mpsc::unbounded_channel();
    let (resume, resumed) = watch::channel(false);
    let stale_receivers = Receivers::new().on(OutboxCategory::OrganizationUpdate, {
        let (book, replica) = (book.clone(), replica.clone());
        move |message: Message<OutboxCategory>| {
            let (book, replica, entered) = (book.clone(), replica.clone(), entered.clone());
            let mut resumed = resumed.clone();
            async move {
                let _ = entered.send(());
                let _ = resumed.wait_for(|go| *go).await;
                replica.apply(&book, &message);
                Ok::<_, outbox_core::HandlerError>(())
            }
        }
    });
    let stale = Drainer::builder(store.clone(), stale_receivers)
        .clock(clock.clone())
        .config(config)
        .build();
    let round = tokio::spawn(async move { stale.drain_due(OutboxKind::Region).await.unwrap() });
    stalled.recv().await.unwrap();
    clock.advance(config.lease_duration());

    backend.write(&store, &[update(&shard, 1, 2)]).await;
    let fresh_receivers = Receivers::new().on(OutboxCategory::OrganizationUpdate, {
        let (book, replica) = (book.clone(), replica.clone());
        move |message: Message<OutboxCategory>| {
            replica.apply(&book, &message);
            async { Ok::<_, outbox_core::HandlerError>(()) }
        }
    });
    let fresh = Drainer::builder(backend.reconnect(&store).await, fresh_receivers)
        .clock(clock.clone())
        .config(config)
        .build();
    let report = fresh.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.deliveries, report.rows_deleted), (1, 2));
    assert_eq!(replica.get(1), Some(2));

    resume.send(true).unwrap();
    let report = round.await.unwrap();
    assert_eq!(report.lost_claims, vec![shard.clone()]);
    assert_eq!(replica.get(1), Some(2), "the newer state wins");
    assert_eq!(replica.superseded.load(Ordering::SeqCst), 1);
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

/// The sender's half: a worker whose lease ended by its own clock while it
/// delivered a shard calls no receiver for the shard's next groups; another
/// worker delivers them once the lease is over.
pub async fn a_worker_whose_lease_ended_calls_no_further_receiver<B: Backend>(backend: &B) {
    let store = backend.fresh("fencing_tokens_sender").await;
    let shard = org(1);
    backend
        .write(
            &store,
            &[
                update(&shard, 1, 1),
                update(&shard, 2, 1),
                update(&shard, 3, 1),
            ],
        )
        .await;
    let clock = ManualClock::starting_now();
    let config = DrainConfig::default();
    let stale = Recorder::new();
    let gate = stale.hold_when(|message| message.object_identifier == 1);
    let round = tokio::spawn({
        let drainer = drainer(store.clone(), &stale, &clock, config);
        async move { drainer.drain_due(OutboxKind::Region).await.unwrap() }
    });
    gate.reached(1).await;
    clock.advance(config.lease_duration());
    gate.open();
    let report = round.await.unwrap();
    assert_eq!(stale.calls(), 1, "objects 2 and 3 were not sent");
    assert_eq!(report.lost_claims, vec![shard.clone()]);

    let fresh = Recorder::new();
    let other = drainer(backend.reconnect(&store).await, &fresh, &clock, config);
    other.drain_due(OutboxKind::Region).await.unwrap();
    let objects: Vec<i64> = fresh.deliveries().iter().map(|d| d.object).collect();
    assert_eq!(objects, vec![1, 2, 3], "the fenced commit deleted nothing");
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

/// A request claims its shard before its commit, then its process pauses
/// past the lease before it delivers (between the commit and the flush):
/// once it resumes, the flush calls no receiver and reports the claim
/// lost; another worker delivers the rows, each once.
pub async fn a_flush_resumed_after_its_lease_delivers_nothing<B: Backend>(backend: &B) {
    let store = backend.fresh("fencing_tokens_flush").await;
    let shard = org(1);
    let clock = ManualClock::starting_now();
    let config = DrainConfig::default();
    let flushed = Recorder::new();
    let flusher = drainer(store.clone(), &flushed, &clock, config);
    let mut txn = backend.begin(&store).await;
    let ids = txn
        .write(&[update(&shard, 1, 1), update(&shard, 2, 1)])
        .await;
    let mut flush = flusher.prepare_flush([(shard.clone(), ids[1])]);
    flush.claim(&*txn).await.unwrap();
    txn.commit().await;
    // The pause.
    clock.advance(config.lease_duration());
    let outcome = flush.deliver().await;
    assert_eq!(flushed.calls(), 0, "no receiver call after the lease ended");
    assert!(
        matches!(&outcome.errors[..], [outbox_core::FlushError::ClaimLost { shard: lost }] if *lost == shard),
        "{:?}",
        outcome.errors
    );
    flusher.settled().await;

    let fresh = Recorder::new();
    let other = drainer(backend.reconnect(&store).await, &fresh, &clock, config);
    other.drain_due(OutboxKind::Region).await.unwrap();
    let objects: Vec<i64> = fresh.deliveries().iter().map(|d| d.object).collect();
    assert_eq!(objects, vec![1, 2]);
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}
