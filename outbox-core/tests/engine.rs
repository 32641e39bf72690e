//! Engine behaviour on bad input and misbehaving receivers, over `MemoryStore`.

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::store::{DrainStore, ShardClaim, StoreAdmin};
use outbox_core::{
    DeliveryError, DrainConfig, Drainer, FlushError, HandlerError, ManualClock, MemoryStore,
    Message, OutboxKind, PayloadError, Receivers, ShardKey,
};
use serde_json::json;

outbox_core::registry! {
    OrgScope = 0 (shard_field = "organization_id") {
        OrgUpdate = 1,
        OrgRename = 2,
        OrgRetired = 3 (retired),
    }
    UserScope = 1 (shard_field = "user_id") {
        UserUpdate = 10,
    }
}

fn org(id: i64) -> ShardKey {
    ShardKey::region(OutboxScope::OrgScope, id)
}

fn ok_receivers() -> Receivers<OutboxCategory> {
    Receivers::new()
        .discard(OutboxCategory::OrgUpdate)
        .discard(OutboxCategory::OrgRename)
        .discard(OutboxCategory::UserUpdate)
}

#[tokio::test]
async fn a_panicking_receiver_is_a_typed_failure_that_loses_nothing() {
    let store = MemoryStore::new();
    store.write(&org(1), OutboxCategory::OrgUpdate, 1, None);
    store.write(&org(2), OutboxCategory::OrgRename, 2, None);
    let receivers = ok_receivers().on(
        OutboxCategory::OrgUpdate,
        |_m: Message<OutboxCategory>| async {
            if true {
                panic!("receiver bug");
            }
            Ok::<_, HandlerError>(())
        },
    );
    let drainer = Drainer::new(store.clone(), receivers);
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.failures.len(), 1);
    assert!(
        matches!(&report.failures[0].error, DeliveryError::Panicked(text) if text == "receiver bug")
    );
    assert_eq!(report.deliveries, 1, "the other shard is delivered");
    assert_eq!(
        store.rows(OutboxKind::Region).len(),
        1,
        "the failed row stays"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hanging_receiver_times_out_and_its_shard_backs_off() {
    let store = MemoryStore::new();
    store.write(&org(1), OutboxCategory::OrgUpdate, 1, None);
    let receivers = ok_receivers().on(
        OutboxCategory::OrgUpdate,
        |_m: Message<OutboxCategory>| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, HandlerError>(())
        },
    );
    let config = DrainConfig::default().delivery_timeout(Duration::from_secs(2));
    let drainer = Drainer::builder(store.clone(), receivers)
        .config(config)
        .build();
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert!(
        matches!(report.failures[0].error, DeliveryError::Timeout(t) if t == Duration::from_secs(2))
    );
    assert_eq!(store.rows(OutboxKind::Region).len(), 1);
    assert!(store.rows(OutboxKind::Region)[0].scheduled_for > chrono::Utc::now());
}

#[tokio::test]
async fn missing_receiver_and_scope_mismatch_hold_the_shard_with_clear_errors() {
    let store = MemoryStore::new();
    store.write(&org(1), OutboxCategory::UserUpdate, 1, None); // user category in an org shard
    store.write(&org(2), OutboxCategory::OrgRename, 2, None);
    let receivers = Receivers::new().discard(OutboxCategory::UserUpdate);
    let drainer = Drainer::new(store.clone(), receivers);
    let mut report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    report.failures.sort_by_key(|f| f.shard.identifier());
    assert!(matches!(
        report.failures[0].error,
        DeliveryError::ScopeMismatch {
            category: "UserUpdate",
            expected_scope: 1,
            row_scope: 0
        }
    ));
    assert!(matches!(
        report.failures[1].error,
        DeliveryError::NoReceiver {
            category: "OrgRename"
        }
    ));
    assert!(report.failures[1]
        .error
        .to_string()
        .contains("Receivers::on"));
    assert_eq!(store.rows(OutboxKind::Region).len(), 2);
}

#[tokio::test]
async fn a_receiver_flushing_its_own_shard_defers_instead_of_deadlocking() {
    let store = MemoryStore::new();
    let first = store.write(&org(1), OutboxCategory::OrgUpdate, 1, None);
    let drainer_slot: Arc<Mutex<Option<Drainer<OutboxCategory>>>> = Arc::default();
    let deferred = Arc::new(Mutex::new(Vec::new()));
    let receivers = ok_receivers().on(OutboxCategory::OrgUpdate, {
        let (store, slot, deferred) = (store.clone(), drainer_slot.clone(), deferred.clone());
        move |message: Message<OutboxCategory>| {
            let (store, slot, deferred) = (store.clone(), slot.clone(), deferred.clone());
            async move {
                // The receiver writes to its own shard and another, then flushes both.
                let same = store.write(&message.shard, OutboxCategory::OrgRename, 9, None);
                let other = store.write(&org(2), OutboxCategory::OrgRename, 9, None);
                let drainer = slot.lock().unwrap().clone().unwrap();
                let same = drainer.drain_shard(&message.shard, Some(same)).await?;
                let other = drainer.drain_shard(&org(2), Some(other)).await?;
                deferred
                    .lock()
                    .unwrap()
                    .push((same.deferred, other.deliveries));
                Ok::<_, HandlerError>(())
            }
        }
    });
    let drainer = Drainer::builder(store.clone(), receivers)
        .config(DrainConfig::default().sync_wait(Duration::from_millis(100)))
        .build();
    *drainer_slot.lock().unwrap() = Some(drainer.clone());
    let report = drainer.drain_shard(&org(1), Some(first)).await.unwrap();
    assert_eq!(report.deliveries, 1);
    assert_eq!(
        *deferred.lock().unwrap(),
        vec![(1, 1)],
        "own shard deferred, other shard flushed"
    );
    // The deferred row is still there for the background drain.
    assert_eq!(store.rows(OutboxKind::Region).len(), 1);
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert!(store.rows(OutboxKind::Region).is_empty());
}

#[tokio::test]
async fn a_database_lost_mid_round_loses_nothing_and_its_claims_expire() {
    let clock = ManualClock::starting_now();
    let store = MemoryStore::new();
    store.write(&org(1), OutboxCategory::OrgUpdate, 1, None);
    let drainer = Drainer::builder(store.clone(), ok_receivers())
        .clock(clock.clone())
        .build();
    // The claim goes through, then the database goes away.
    store.fail_calls(1, 1);
    let error = drainer.drain_due(OutboxKind::Region).await.unwrap_err();
    assert!(
        error.to_string().contains("commit a drain round"),
        "{error}"
    );
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 1);
    // The orphaned claim holds the shard for its lease only.
    assert_eq!(
        drainer.drain_due(OutboxKind::Region).await.unwrap().shards,
        0
    );
    clock.advance(drainer.config().lease_duration() + Duration::from_secs(1));
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 1);
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

#[tokio::test]
async fn a_store_error_files_the_claims_and_releasing_them_frees_the_shard_at_once() {
    let clock = ManualClock::starting_now();
    let store = MemoryStore::new();
    store.write(&org(1), OutboxCategory::OrgUpdate, 1, None);
    let drainer = Drainer::builder(store.clone(), ok_receivers())
        .clock(clock.clone())
        .build();
    store.fail_calls(1, 1); // the claim goes through, the commit fails
    drainer.drain_due(OutboxKind::Region).await.unwrap_err();
    assert!(drainer.has_abandoned());
    // While the database is still away, the claims stay filed.
    store.fail_calls(0, 1);
    drainer.release_abandoned().await.unwrap_err();
    assert!(drainer.has_abandoned());
    assert_eq!(drainer.release_abandoned().await.unwrap(), 1);
    assert!(!drainer.has_abandoned());
    // No lease to wait for: the shard drains at once.
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 1);
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

#[tokio::test]
async fn a_cancelled_round_files_its_claims_and_another_worker_takes_them_once_released() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let clock = ManualClock::starting_now();
    let store = MemoryStore::new();
    store.write(&org(1), OutboxCategory::OrgUpdate, 1, None);
    store.write(&org(1), OutboxCategory::OrgUpdate, 2, None);
    store.write(&org(2), OutboxCategory::OrgUpdate, 3, None);
    let hang = Arc::new(AtomicBool::new(true));
    let entered = Arc::new(tokio::sync::Notify::new());
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let receivers = {
        let (hang, entered, delivered) = (hang.clone(), entered.clone(), delivered.clone());
        Receivers::new().on(
            OutboxCategory::OrgUpdate,
            move |message: Message<OutboxCategory>| {
                let (hang, entered, delivered) = (hang.clone(), entered.clone(), delivered.clone());
                async move {
                    if hang.swap(false, Ordering::SeqCst) {
                        entered.notify_one();
                        std::future::pending::<()>().await;
                    }
                    delivered.lock().unwrap().push(message.object_identifier);
                    Ok::<(), HandlerError>(())
                }
            },
        )
    };
    let first = Drainer::builder(store.clone(), receivers)
        .clock(clock.clone())
        .owner("first")
        .build();
    let round = tokio::spawn({
        let first = first.clone();
        async move { first.drain_due(OutboxKind::Region).await }
    });
    entered.notified().await;
    round.abort(); // the worker is cut off mid-delivery
    assert!(round.await.unwrap_err().is_cancelled());
    assert!(first.has_abandoned());

    let second = Drainer::builder(store.clone(), ok_receivers())
        .clock(clock.clone())
        .owner("second")
        .build();
    assert_eq!(
        second.drain_due(OutboxKind::Region).await.unwrap().shards,
        0,
        "both shards are still claimed by the cancelled round"
    );
    assert_eq!(first.release_abandoned().await.unwrap(), 2);
    assert_eq!(first.release_abandoned().await.unwrap(), 0);
    let report = second.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.shards, report.rows_deleted), (2, 3));
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
    // A round that ends normally files nothing.
    store.write(&org(3), OutboxCategory::OrgUpdate, 4, None);
    first.drain_due(OutboxKind::Region).await.unwrap();
    assert!(!first.has_abandoned());
    // Object 3 was delivered by the cancelled round too (never acknowledged,
    // so delivered again by the second worker: at least once).
    assert_eq!(*delivered.lock().unwrap(), vec![3, 4]);
}

#[tokio::test]
async fn a_sync_flush_reports_a_busy_shard() {
    let clock = ManualClock::starting_now();
    let store = MemoryStore::new();
    let id = store.write(&org(1), OutboxCategory::OrgUpdate, 1, None);
    let request = outbox_core::store::ClaimRequest {
        kind: OutboxKind::Region,
        now: outbox_core::Clock::now(&clock),
        lease_until: outbox_core::Clock::now(&clock) + chrono::Duration::seconds(30),
        token: 7,
        owner: "someone else".into(),
        rows: 1,
        up_to_id: None,
        order: outbox_core::store::ClaimOrder::Oldest,
        beyond: 0,
        shard_rows: usize::MAX,
        held_rows: 0,
    };
    assert!(matches!(
        store.claim_shard(&request, &org(1)).await.unwrap(),
        ShardClaim::Claimed(_)
    ));
    let drainer = Drainer::builder(store.clone(), ok_receivers())
        .clock(clock.clone())
        .config(DrainConfig::default().sync_wait(Duration::from_millis(30)))
        .build();
    let error = drainer.drain_shard(&org(1), Some(id)).await.unwrap_err();
    assert!(matches!(error, FlushError::ShardBusy { .. }), "{error}");
    assert!(error.to_string().contains("left to the background drain"));
}

#[test]
fn receivers_report_missing_and_duplicate_registrations() {
    let receivers = Receivers::<OutboxCategory>::new()
        .discard(OutboxCategory::OrgUpdate)
        .discard(OutboxCategory::OrgUpdate);
    assert_eq!(
        receivers.missing(),
        vec![OutboxCategory::OrgRename, OutboxCategory::UserUpdate]
    );
    assert_eq!(
        receivers.missing_in(&[OutboxScope::UserScope]),
        vec![OutboxCategory::UserUpdate]
    );
    let error = receivers.ensure_complete().unwrap_err();
    assert_eq!(error.missing, vec!["OrgRename", "UserUpdate"]);
    assert_eq!(error.duplicates, vec!["OrgUpdate"]);
    let text = error.to_string();
    assert!(
        text.contains("no receiver for [OrgRename, UserUpdate]")
            && text.contains("registered twice: [OrgUpdate]"),
        "{text}"
    );
    assert!(
        ok_receivers().ensure_complete().is_ok(),
        "retired categories need no receiver"
    );
}

#[tokio::test]
async fn payload_decoding_errors_are_typed() {
    let store = MemoryStore::new();
    store.write(
        &org(1),
        OutboxCategory::OrgUpdate,
        1,
        Some(json!({ "name": 5 })),
    );
    store.write(&org(2), OutboxCategory::OrgUpdate, 2, None);
    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Rename {
        name: String,
    }
    let errors = Arc::new(Mutex::new(Vec::new()));
    let receivers = ok_receivers().on(OutboxCategory::OrgUpdate, {
        let errors = errors.clone();
        move |message: Message<OutboxCategory>| {
            let errors = errors.clone();
            async move {
                let error = message.payload_as::<Rename>().unwrap_err();
                let malformed = matches!(error, PayloadError::Malformed { .. });
                errors.lock().unwrap().push((malformed, error.to_string()));
                Err::<(), HandlerError>(error.into())
            }
        }
    });
    Drainer::new(store.clone(), receivers)
        .drain_due(OutboxKind::Region)
        .await
        .unwrap();
    let mut errors = errors.lock().unwrap().clone();
    errors.sort();
    assert!(!errors[0].0 && errors[0].1.contains("has no payload"));
    assert!(
        errors[1].0 && errors[1].1.contains("::Rename`: invalid type"),
        "{}",
        errors[1].1
    );
    assert_eq!(store.rows(OutboxKind::Region).len(), 2, "nothing lost");
}

#[test]
fn retired_categories_are_known_but_flagged() {
    use outbox_core::Category;
    assert!(OutboxCategory::OrgRetired.is_retired());
    assert_eq!(OutboxCategory::try_from(3), Ok(OutboxCategory::OrgRetired));
    assert_eq!(
        OutboxCategory::try_from(4),
        Err(outbox_core::UnknownCategory(4))
    );
}

#[tokio::test]
async fn a_scope_that_opts_in_dead_letters_a_poison_group_and_the_shard_goes_on() {
    let clock = ManualClock::starting_now();
    let store = MemoryStore::new().with_clock(clock.clone());
    let poison = store.write(
        &org(1),
        OutboxCategory::OrgUpdate,
        1,
        Some(json!({ "poison": true })),
    );
    store.write(&org(1), OutboxCategory::OrgRename, 2, None);
    let user = ShardKey::region(OutboxScope::UserScope, 7);
    store.write(
        &user,
        OutboxCategory::UserUpdate,
        7,
        Some(json!({ "poison": true })),
    );
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let receivers = {
        let mut receivers = Receivers::new();
        for category in [
            OutboxCategory::OrgUpdate,
            OutboxCategory::OrgRename,
            OutboxCategory::UserUpdate,
        ] {
            let delivered = delivered.clone();
            receivers.register(category, move |message: Message<OutboxCategory>| {
                let delivered = delivered.clone();
                async move {
                    if message
                        .payload
                        .as_ref()
                        .is_some_and(|p| p.to_value_or_text()["poison"] == true)
                    {
                        return Err::<(), HandlerError>("cannot handle this".into());
                    }
                    delivered.lock().unwrap().push(message.object_identifier);
                    Ok(())
                }
            });
        }
        receivers
    };
    let drainer = Drainer::builder(store.clone(), receivers)
        .clock(clock.clone())
        .dead_letter(OutboxScope::OrgScope, 3)
        .build();
    for attempt in 1..=5 {
        let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
        let org_failure = report.failures.iter().find(|f| f.shard == org(1));
        if attempt < 3 {
            assert!(
                !org_failure.unwrap().dead_lettered,
                "attempt {attempt}: backs off first"
            );
        } else if attempt == 3 {
            assert!(
                org_failure.unwrap().dead_lettered,
                "the third failure dead-letters"
            );
            assert_eq!(report.dead_lettered, 1);
            assert_eq!(*delivered.lock().unwrap(), vec![2], "the shard went on");
        }
        let user_failure = report.failures.iter().find(|f| f.shard == user).unwrap();
        assert!(!user_failure.dead_lettered, "other scopes retry forever");
        clock.advance(Duration::from_secs(3600));
    }
    let dead = store.dead_letters(OutboxKind::Region, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].row.id, poison);
    assert!(dead[0].error.contains("cannot handle this"));
    // Replayed after a fix, it is delivered.
    assert_eq!(
        store
            .replay_dead_letters(OutboxKind::Region, &[poison])
            .await
            .unwrap(),
        1
    );
    assert!(store
        .dead_letters(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());
    let fixed = Drainer::builder(store.clone(), ok_receivers())
        .clock(clock.clone())
        .build();
    let report = fixed.drain_due(OutboxKind::Region).await.unwrap();
    assert!(report.deliveries >= 1);
    assert!(store
        .rows(OutboxKind::Region)
        .iter()
        .all(|row| row.id != poison));
}

#[tokio::test]
async fn after_a_dead_letter_the_next_poison_group_gets_its_full_attempts() {
    let clock = ManualClock::starting_now();
    let store = MemoryStore::new().with_clock(clock.clone());
    let first = store.write(
        &org(1),
        OutboxCategory::OrgUpdate,
        1,
        Some(json!({ "poison": true })),
    );
    let second = store.write(
        &org(1),
        OutboxCategory::OrgUpdate,
        2,
        Some(json!({ "poison": true })),
    );
    let receivers = ok_receivers().on(
        OutboxCategory::OrgUpdate,
        |message: Message<OutboxCategory>| async move {
            if message
                .payload
                .as_ref()
                .is_some_and(|p| p.to_value_or_text()["poison"] == true)
            {
                return Err::<(), HandlerError>("poison".into());
            }
            Ok(())
        },
    );
    let drainer = Drainer::builder(store.clone(), receivers)
        .clock(clock.clone())
        .dead_letters(outbox_core::DeadLetterPolicy::new().after(OutboxScope::OrgScope, 2))
        .build();
    let mut dead_after = Vec::new();
    for round in 1..=6 {
        let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
        for failure in report.failures.iter().filter(|f| f.dead_lettered) {
            dead_after.push((failure.id, round));
        }
        clock.advance(Duration::from_secs(3600));
    }
    // The first group dies on its 2nd failure (round 2); in that same round the
    // second group fails once (attempts start over), and dies on round 3.
    assert_eq!(dead_after, vec![(first, 2), (second, 3)]);
}

/// Runs the manual clock and tokio's paused clock forward together, one
/// second at a time, so that heartbeats fire and see the time pass.
async fn pass_time(clock: &ManualClock, seconds: u64) {
    for _ in 0..seconds {
        clock.advance(Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_receiver_keeps_its_claim_alive_past_the_lease() {
    let clock = ManualClock::starting_now();
    let store = MemoryStore::new();
    store.write(&org(1), OutboxCategory::OrgUpdate, 1, None);
    let recorder = outbox_testing::Recorder::<OutboxCategory>::new();
    let gate = recorder.hold_when(|_| true);
    let slow = Drainer::builder(store.clone(), recorder.receivers())
        .clock(clock.clone())
        .config(DrainConfig::default().delivery_timeout(Duration::from_secs(60)))
        .build();
    let round = tokio::spawn({
        let slow = slow.clone();
        async move { slow.drain_due(OutboxKind::Region).await.unwrap() }
    });
    gate.reached(1).await;
    // Ten leases' worth of time: the heartbeats renew the claim each second.
    pass_time(&clock, 30).await;
    let other = Drainer::builder(store.clone(), ok_receivers())
        .clock(clock.clone())
        .build();
    assert!(
        other
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .is_empty(),
        "the claim must still hold"
    );
    gate.open();
    let report = round.await.unwrap();
    assert_eq!((report.deliveries, report.lost_claims.len()), (1, 0));
    assert!(store.rows(OutboxKind::Region).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_claim_that_cannot_be_renewed_stops_its_receivers_before_the_lease_ends() {
    let clock = ManualClock::starting_now();
    let store = MemoryStore::new();
    store.write(&org(1), OutboxCategory::OrgUpdate, 1, None);
    let recorder = outbox_testing::Recorder::<OutboxCategory>::new();
    let gate = recorder.hold_when(|_| true);
    let config = DrainConfig::default().delivery_timeout(Duration::from_secs(60));
    let cut_off = Drainer::builder(store.clone(), recorder.receivers())
        .clock(clock.clone())
        .config(config)
        .build();
    let round = tokio::spawn({
        let cut_off = cut_off.clone();
        async move { cut_off.drain_due(OutboxKind::Region).await.unwrap() }
    });
    gate.reached(1).await;
    // The database goes away: every renewal fails.
    store.fail_next_calls(u32::MAX);
    tokio::time::advance(config.lease_duration() - Duration::from_millis(400)).await;
    let report = round.await.unwrap();
    assert_eq!(
        report.lost_claims,
        vec![org(1)],
        "given up before the lease ended"
    );
    assert!(recorder.deliveries().is_empty());
    // The claim ends with its lease; the row is delivered by the next owner.
    store.fail_next_calls(0);
    clock.advance(config.lease_duration());
    let next = Drainer::builder(store.clone(), ok_receivers())
        .clock(clock.clone())
        .build();
    assert_eq!(
        next.drain_due(OutboxKind::Region).await.unwrap().deliveries,
        1
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_receiver_holds_only_its_own_bucket() {
    let clock = ManualClock::starting_now();
    let store = MemoryStore::new();
    for id in 1..=5 {
        store.write(&org(id), OutboxCategory::OrgUpdate, id, None);
    }
    let recorder = outbox_testing::Recorder::<OutboxCategory>::new();
    let gate = recorder.hold_when(|message| message.shard_identifier() == 1);
    let config = DrainConfig::default();
    let drainer = Drainer::builder(store.clone(), recorder.receivers())
        .clock(clock.clone())
        .config(config)
        .build();
    let round = tokio::spawn({
        let drainer = drainer.clone();
        async move { drainer.drain_due(OutboxKind::Region).await.unwrap() }
    });
    gate.reached(1).await;
    assert!(recorder.wait_for(4, Duration::from_secs(1)).await);
    // Within the commit interval, the four finished shards commit without
    // waiting for the slow one, and their buckets are free again.
    let remaining = || -> Vec<i64> {
        store
            .rows(OutboxKind::Region)
            .iter()
            .map(|row| row.object_identifier)
            .collect()
    };
    let step = Duration::from_millis(5);
    let mut waited = Duration::ZERO;
    while remaining() != vec![1] && waited <= outbox_core::drain::DEFAULT_COMMIT_INTERVAL * 2 {
        tokio::time::advance(step).await;
        tokio::task::yield_now().await;
        waited += step;
    }
    assert_eq!(remaining(), vec![1]);
    let id = store.write(&org(2), OutboxCategory::OrgUpdate, 6, None);
    let flush = Drainer::builder(store.clone(), ok_receivers())
        .clock(clock.clone())
        .build();
    assert_eq!(
        flush
            .drain_shard(&org(2), Some(id))
            .await
            .unwrap()
            .deliveries,
        1
    );
    gate.open();
    let report = round.await.unwrap();
    assert_eq!((report.deliveries, report.lost_claims.len()), (5, 0));
    assert!(store.rows(OutboxKind::Region).is_empty());
}
