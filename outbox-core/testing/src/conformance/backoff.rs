//! Rule 5: a handler error stops its shard, and the whole shard is
//! rescheduled with a delay doubling from 1 s; other shards are unaffected.
//! A backing-off shard waits whoever asks: the background drain, or a
//! synchronous flush racing it. A scope may opt into dead-lettering instead.

use std::time::Duration;

use super::{
    audit, drainer, drainer_builder, org, update, Backend, NewRow, OutboxCategory, OutboxScope,
};
use crate::{drain_until_idle, Recorder};
use outbox_core::clock::{Clock, ManualClock};
use outbox_core::drain::{DrainConfig, FlushError};
use outbox_core::shard::OutboxKind;
use outbox_core::store::StoreAdmin;

async fn state_of<S: StoreAdmin>(store: &S) -> outbox_core::store::ShardState {
    let failing = store.failing_shards(OutboxKind::Region, 10).await.unwrap();
    assert_eq!(failing.len(), 1, "{failing:?}");
    failing[0].state.clone()
}

/// The failing shard's rows (even one written during its backoff) wait for
/// 1 s, then 2 s, then 4 s, and are then delivered in order; the healthy
/// shard is delivered at once; a flush of the failing shard is refused.
pub async fn a_failing_shard_backs_off_as_a_whole_and_others_flow<B: Backend>(backend: &B) {
    let store = backend.fresh("backoff").await;
    let (failing, healthy) = (org(1), org(2));
    backend
        .write(
            &store,
            &[
                update(&failing, 1, 1),
                update(&failing, 2, 2),
                update(&healthy, 3, 3),
            ],
        )
        .await;
    let clock = ManualClock::starting_now();
    let start = clock.now();
    let recorder = Recorder::new();
    recorder.fail_when(|message| message.object_identifier == 1);
    let drainer = drainer(store.clone(), &recorder, &clock, DrainConfig::default());

    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 1, "the healthy shard flows");
    assert_eq!(report.failures.len(), 1);
    let state = state_of(&store).await;
    assert_eq!(
        (state.attempts, state.last_backoff, state.retry_at),
        (
            1,
            Some(Duration::from_secs(1)),
            start + chrono::Duration::seconds(1)
        )
    );
    assert!(state.last_error.unwrap_or_default().contains("refused"));

    // A row written during the backoff waits with the rest.
    let ids = backend.write(&store, &[update(&failing, 4, 4)]).await;
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 0);
    assert!(!store
        .has_due(OutboxKind::Region, clock.now())
        .await
        .unwrap());
    let error = drainer
        .drain_shard(&failing, Some(ids[0]))
        .await
        .unwrap_err();
    assert!(matches!(error, FlushError::BackingOff { .. }), "{error}");

    // Attempt 2 after 1 s; attempt 3 after 2 s more; then 4 s; never earlier.
    clock.advance(Duration::from_secs(1));
    for (attempts, delay) in [(2, 2), (3, 4)] {
        let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
        assert_eq!(report.failures.len(), 1, "attempt {attempts}");
        let state = state_of(&store).await;
        assert_eq!(state.attempts, attempts);
        assert_eq!(state.last_backoff, Some(Duration::from_secs(delay)));
        clock.advance(Duration::from_millis(delay * 1000 - 1));
        assert!(
            drainer
                .drain_due(OutboxKind::Region)
                .await
                .unwrap()
                .is_empty(),
            "tried before its backoff ended"
        );
        clock.advance(Duration::from_millis(1));
    }
    recorder.stop_failing();
    drain_until_idle(&drainer, &[OutboxKind::Region])
        .await
        .unwrap();
    let objects: Vec<i64> = recorder.deliveries().iter().map(|d| d.object).collect();
    assert_eq!(objects, vec![3, 1, 2, 4]);
    assert_eq!(
        recorder.calls() - recorder.deliveries().len(),
        3,
        "three failed attempts"
    );
    assert!(store
        .failing_shards(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());
}

/// The retry race: the background drain delivers a failing shard while a
/// synchronous flush of the same shard arrives and waits for its bucket.
/// When the drain's failure is committed, the flush must see the backoff and
/// leave the shard alone: each backoff step gets one attempt, never two, and
/// the delays still double. Flushes and drains arriving right after a
/// failure find nothing to do either.
pub async fn a_flush_racing_a_drain_on_a_failing_shard_tries_once_per_step<B: Backend>(
    backend: &B,
) {
    let store = backend.fresh("retry_race").await;
    let shard = org(1);
    let id = backend.write(&store, &[update(&shard, 1, 1)]).await[0];
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    recorder.fail_when(|_| true);
    let config = DrainConfig::default().sync_wait(Duration::from_secs(30));
    let background = drainer(store.clone(), &recorder, &clock, config);
    let flusher = drainer(backend.reconnect(&store).await, &recorder, &clock, config);
    for (step, delay) in [1u64, 2, 4, 8].into_iter().enumerate() {
        let gate = recorder.hold_when(|_| true);
        let drain = tokio::spawn({
            let background = background.clone();
            async move { background.drain_due(OutboxKind::Region).await.unwrap() }
        });
        gate.reached(1).await;
        // The request's flush arrives while the drain's receiver runs.
        let flush = tokio::spawn({
            let (flusher, shard) = (flusher.clone(), shard.clone());
            async move { flusher.drain_shard(&shard, Some(id)).await }
        });
        gate.open();
        assert_eq!(drain.await.unwrap().failures.len(), 1);
        match flush.await.unwrap() {
            Err(FlushError::BackingOff { .. }) => {}
            other => panic!("step {step}: the flush should see the backoff: {other:?}"),
        }
        // Arriving right after the failure, neither tries again.
        assert!(background
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .is_empty());
        let again = flusher.drain_shard(&shard, Some(id)).await.unwrap_err();
        assert!(matches!(again, FlushError::BackingOff { .. }), "{again}");

        assert_eq!(
            recorder.calls(),
            step + 1,
            "step {step}: one attempt, not two"
        );
        let state = state_of(&store).await;
        assert_eq!(state.attempts as usize, step + 1);
        assert_eq!(state.last_backoff, Some(Duration::from_secs(delay)));
        clock.advance(Duration::from_secs(delay));
    }
}

/// A scope that opts in dead-letters a poison group after its attempts: the
/// shard goes on in the same round, the dead letter can be listed and
/// replayed, and the next failure starts counting from zero.
pub async fn an_opted_in_scope_dead_letters_and_the_shard_goes_on<B: Backend>(backend: &B) {
    // (Replayed dead letters are delivered; discarded ones are gone.)
    let store = backend.fresh("dead_letters").await;
    let shard = audit(5);
    let event = |object| NewRow {
        category: OutboxCategory::AuditLogEvent,
        ..update(&shard, object, object)
    };
    let ids = backend.write(&store, &[event(1), event(2)]).await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    recorder.fail_when(|message| message.object_identifier == 1);
    let drainer = drainer_builder(store.clone(), &recorder, &clock, DrainConfig::default())
        .dead_letter(OutboxScope::AuditLogScope, 2)
        .build();

    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.deliveries, report.dead_lettered), (0, 0));
    clock.advance(Duration::from_secs(1));
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.deliveries, report.dead_lettered), (1, 1));
    assert!(report.failures[0].dead_lettered);
    let dead = store.dead_letters(OutboxKind::Region, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!((dead[0].row.id, &dead[0].row.shard), (ids[0], &shard));
    assert!(dead[0].error.contains("refused"), "{}", dead[0].error);
    assert!(store
        .failing_shards(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);

    recorder.stop_failing();
    assert_eq!(
        store
            .replay_dead_letters(OutboxKind::Region, &ids[..1])
            .await
            .unwrap(),
        1
    );
    assert!(store
        .dead_letters(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    let objects: Vec<i64> = recorder.deliveries().iter().map(|d| d.object).collect();
    assert_eq!(objects, vec![2, 1]);
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);

    // A dead letter an operator discards is gone for good.
    recorder.fail_when(|_| true);
    let more = backend.write(&store, &[event(3)]).await;
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    clock.advance(Duration::from_secs(2));
    assert_eq!(
        drainer
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .dead_lettered,
        1
    );
    let discard = |ids: Vec<i64>| {
        let store = store.clone();
        async move {
            store
                .discard_dead_letters(OutboxKind::Region, &ids)
                .await
                .unwrap()
        }
    };
    assert_eq!(discard(vec![more[0], 999_999]).await, 1);
    assert_eq!(discard(vec![more[0]]).await, 0, "already gone");
    assert!(store
        .dead_letters(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store
            .replay_dead_letters(OutboxKind::Region, &more)
            .await
            .unwrap(),
        0
    );
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

/// A permanent error quarantines its shard where the scope does not
/// dead-letter: not retried however long one waits, not by a flush either,
/// rows written meanwhile wait with it, and it is listed as quarantined.
/// Other shards flow. `retry_now` releases it, and it is delivered in order.
pub async fn a_permanent_error_quarantines_its_shard_until_released<B: Backend>(backend: &B) {
    let store = backend.fresh("quarantine").await;
    let (poisoned, healthy) = (org(1), org(2));
    backend
        .write(
            &store,
            &[
                update(&poisoned, 1, 1),
                update(&poisoned, 2, 2),
                update(&healthy, 3, 3),
            ],
        )
        .await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    recorder.fail_permanently_when(|message| message.object_identifier == 1);
    let drainer = drainer(store.clone(), &recorder, &clock, DrainConfig::default());

    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 1, "the healthy shard flows");
    assert_eq!(report.dead_lettered, 0, "the scope does not dead-letter");
    assert!(report.failures[0].error.is_permanent());
    let state = state_of(&store).await;
    assert!(state.is_quarantined(), "{state:?}");
    assert!(state.last_error.unwrap_or_default().contains("refused"));

    // However long one waits, nothing of it is tried; a new row waits too.
    let ids = backend.write(&store, &[update(&poisoned, 4, 4)]).await;
    clock.advance(Duration::from_secs(7 * 24 * 3600));
    for _ in 0..2 {
        let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
        assert_eq!((report.deliveries, report.failures.len()), (0, 0));
        assert!(!store
            .has_due(OutboxKind::Region, clock.now())
            .await
            .unwrap());
    }
    let error = drainer
        .drain_shard(&poisoned, Some(ids[0]))
        .await
        .unwrap_err();
    assert!(matches!(error, FlushError::BackingOff { .. }), "{error}");
    assert_eq!(recorder.calls(), 2, "one failed call, one delivery");
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 3);

    // An operator fixes the receiver and releases the shard.
    recorder.stop_failing();
    let released = store
        .retry_now(std::slice::from_ref(&poisoned), clock.now())
        .await
        .unwrap();
    assert_eq!(released, vec![poisoned.clone()]);
    let state = state_of(&store).await;
    assert!(
        !state.is_quarantined() && state.retry_at <= clock.now(),
        "{state:?}"
    );
    assert_eq!(state.attempts, 1, "the attempts stay until a success");
    drain_until_idle(&drainer, &[OutboxKind::Region])
        .await
        .unwrap();
    let objects: Vec<i64> = recorder.deliveries().iter().map(|d| d.object).collect();
    assert_eq!(objects, vec![3, 1, 2, 4]);
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

/// Where the scope dead-letters, a permanent error dead-letters its group on
/// the first attempt, whatever the attempts the policy allows transient
/// errors, and the shard goes on in the same round.
pub async fn a_permanent_error_is_dead_lettered_at_once_where_the_scope_allows<B: Backend>(
    backend: &B,
) {
    let store = backend.fresh("permanent_dead_letter").await;
    let shard = audit(5);
    let event = |object| NewRow {
        category: OutboxCategory::AuditLogEvent,
        ..update(&shard, object, object)
    };
    let ids = backend.write(&store, &[event(1), event(2)]).await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    recorder.fail_permanently_when(|message| message.object_identifier == 1);
    let drainer = drainer_builder(store.clone(), &recorder, &clock, DrainConfig::default())
        .dead_letter(OutboxScope::AuditLogScope, 10)
        .build();

    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.deliveries, report.dead_lettered), (1, 1));
    let dead = store.dead_letters(OutboxKind::Region, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].row.id, ids[0]);
    assert!(dead[0].error.contains("permanent"), "{}", dead[0].error);
    assert!(store
        .failing_shards(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(recorder.calls(), 2);
}

/// `retry_now` releases a backing-off shard at once, but leaves alone a
/// shard whose bucket a worker holds: that worker may be about to write the
/// shard's state.
pub async fn retry_now_leaves_a_shard_whose_bucket_is_held_alone<B: Backend>(backend: &B) {
    let store = backend.fresh("retry_now_held").await;
    let (failing, busy) = (org(1), org(2));
    backend
        .write(&store, &[update(&failing, 1, 1), update(&busy, 2, 2)])
        .await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    recorder.fail_when(|message| message.object_identifier == 1);
    let drainer = drainer(store.clone(), &recorder, &clock, DrainConfig::default());
    let gate = recorder.hold_when(|message| message.object_identifier == 2);
    let round = tokio::spawn({
        let drainer = drainer.clone();
        async move { drainer.drain_due(OutboxKind::Region).await.unwrap() }
    });
    // The failing shard has failed; the busy one is held in its receiver.
    gate.reached(1).await;
    let released = store
        .retry_now(std::slice::from_ref(&busy), clock.now())
        .await
        .unwrap();
    assert!(released.is_empty(), "a held bucket is left alone");
    gate.open();
    let report = round.await.unwrap();
    assert_eq!((report.deliveries, report.failures.len()), (1, 1));
    let state = state_of(&store).await;
    assert_eq!(state.attempts, 1);

    // A transient backoff of an hour is cut short by retry_now.
    recorder.stop_failing();
    let released = store
        .retry_now(std::slice::from_ref(&failing), clock.now())
        .await
        .unwrap();
    assert_eq!(released, vec![failing.clone()]);
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(
        report.deliveries, 1,
        "due at once, without the clock moving"
    );
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

/// When a receiver comes back after an outage, the shards that backed off
/// on it are made due at once rather than at the end of their backoff, a
/// bounded batch at a time (`recovery_batch`, at most once a second); while
/// it is down, one shard a second probes it. A single failure among
/// successes (a poison message) is not an outage: it waits out its backoff.
pub async fn a_receiver_that_is_back_gets_its_backed_off_shards_at_once<B: Backend>(backend: &B) {
    let store = backend.fresh("recovery").await;
    let down: Vec<_> = (1..=3).map(org).collect();
    let rows: Vec<NewRow> = down
        .iter()
        .map(|shard| update(shard, shard.identifier(), 0))
        .collect();
    backend.write(&store, &rows).await;
    let clock = ManualClock::starting_now();
    let start = clock.now();
    let recorder = Recorder::new();
    recorder.fail_when(|_| true); // the receiver is down
    let config = DrainConfig::default().recovery_batch(2);
    let drainer = drainer(store.clone(), &recorder, &clock, config);
    assert_eq!(
        drainer
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .failures
            .len(),
        3
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        drainer
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .failures
            .len(),
        3
    );
    // Backing off until start + 3 s. While the receiver is down, one shard
    // a second is probed before its backoff ends (the first a second after
    // the outage was seen).
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(
        (report.deliveries, report.failures.len()),
        (0, 1),
        "a probe"
    );
    assert!(
        drainer
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .is_empty(),
        "one probe a second"
    );
    // The receiver comes back; a new shard's delivery succeeds, and the
    // round makes two of the three due.
    recorder.stop_failing();
    backend.write(&store, &[update(&org(4), 4, 0)]).await;
    assert_eq!(
        drainer
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .deliveries,
        1
    );
    assert_eq!(
        drainer
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .deliveries,
        2
    );
    assert!(
        drainer
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .is_empty(),
        "the third waits: one batch a second"
    );
    clock.advance(Duration::from_secs(1));
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(
        drainer
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .deliveries,
        1
    );
    assert!(
        clock.now() < start + chrono::Duration::seconds(3),
        "before its backoff ended"
    );
    let mut objects: Vec<i64> = recorder.deliveries().iter().map(|d| d.object).collect();
    objects.sort_unstable();
    assert_eq!(objects, vec![1, 2, 3, 4]);
    assert!(store
        .failing_shards(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());

    // A poison message among successes waits out its backoff.
    clock.advance(Duration::from_secs(1));
    recorder.fail_when(|message| message.object_identifier == 5);
    backend
        .write(&store, &[update(&org(5), 5, 0), update(&org(6), 6, 0)])
        .await;
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.deliveries, report.failures.len()), (1, 1));
    backend.write(&store, &[update(&org(7), 7, 0)]).await;
    assert_eq!(
        drainer
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .deliveries,
        1
    );
    clock.advance(Duration::from_millis(999));
    for _ in 0..2 {
        assert!(drainer
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .is_empty());
    }
    let failed_calls = recorder.calls() - recorder.deliveries().len();
    assert_eq!(
        failed_calls,
        6 + 1 + 1,
        "six while down, one probe, one for the poison message"
    );
}
