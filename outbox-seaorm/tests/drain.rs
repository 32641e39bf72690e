//! The rules of ARCHITECTURE.md against real PostgreSQL and SQLite.

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{database, OutboxCategory, OutboxScope, Recorder};
use outbox_core::{
    BackoffPolicy, DeliveryError, DrainConfig, DrainReport, Drainer, FlushError, HandlerError,
    KillSwitch, ManualClock, Message, OutboxKind, Receivers, ShardKey, ShardRead, Store,
    StoreError,
};
use outbox_seaorm::testing::TestDatabase;
use outbox_seaorm::{write_control, write_region, write_region_many, OutboxMessage};
use sea_orm::{DbBackend, TransactionTrait};
use serde_json::json;

fn org(
    category: OutboxCategory,
    org: i64,
    object: i64,
    payload: serde_json::Value,
) -> OutboxMessage<OutboxCategory> {
    OutboxMessage::new(category, org, object).with_payload(payload)
}

async fn rolled_back_transaction_writes_no_row(backend: DbBackend) {
    let t = database(backend, "rollback").await;
    let store = t.store();
    let txn = t.db.begin().await.unwrap();
    write_region(
        &txn,
        org(OutboxCategory::OrganizationUpdate, 1, 1, json!({"v": 1})),
    )
    .await
    .unwrap();
    txn.rollback().await.unwrap();
    let txn = t.db.begin().await.unwrap();
    write_region(
        &txn,
        org(OutboxCategory::OrganizationUpdate, 2, 2, json!({"v": 2})),
    )
    .await
    .unwrap();
    drop(txn); // dropping without commit rolls back
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);

    let recorder = Recorder::new();
    let drainer = Drainer::new(store.clone(), recorder.receivers());
    assert!(drainer
        .drain_due(OutboxKind::Region)
        .await
        .unwrap()
        .is_empty());
    assert!(recorder.deliveries().is_empty());
}

async fn committed_transaction_writes_exactly_its_rows(backend: DbBackend) {
    let t = database(backend, "commit").await;
    let store = t.store();
    let txn = t.db.begin().await.unwrap();
    let written = write_region_many(
        &txn,
        [
            org(OutboxCategory::OrganizationUpdate, 1, 1, json!({"v": 1})),
            org(
                OutboxCategory::OrganizationMemberUpdate,
                1,
                9,
                json!({"v": 2}),
            ),
            OutboxMessage::new(OutboxCategory::UserUpdate, 5, 5),
        ],
    )
    .await
    .unwrap();
    let control = write_control(
        &txn,
        ["us", "de"],
        OutboxMessage::new(OutboxCategory::UserUpdate, 5, 5),
    )
    .await
    .unwrap();
    txn.commit().await.unwrap();

    assert_eq!(written.len(), 3);
    assert!(written.windows(2).all(|w| w[0].id < w[1].id));
    assert_eq!(
        written[2].shard,
        ShardKey::region(OutboxScope::UserScope, 5)
    );
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 3);
    assert_eq!(store.pending_count(OutboxKind::Control).await.unwrap(), 2);
    let shards: Vec<ShardKey> = control.iter().map(|w| w.shard.clone()).collect();
    assert_eq!(
        shards,
        vec![
            ShardKey::control("us", OutboxScope::UserScope, 5),
            ShardKey::control("de", OutboxScope::UserScope, 5)
        ]
    );
    let reads: Vec<ShardRead> = written
        .iter()
        .map(|w| ShardRead {
            shard: w.shard.clone(),
            up_to_id: None,
        })
        .collect();
    let rows = store
        .read_rows(OutboxKind::Region, &reads[1..], 10)
        .await
        .unwrap();
    let payloads: Vec<_> = rows.iter().map(|r| r.payload.clone()).collect();
    assert_eq!(
        payloads,
        vec![Some(json!({"v": 1})), Some(json!({"v": 2})), None]
    );
}

async fn groups_are_delivered_in_order_of_their_lowest_id(backend: DbBackend) {
    let t = database(backend, "ordering").await;
    // Interleave three shards; within shard 1, objects 10, 11, 10, 12, 11.
    let mut messages = Vec::new();
    for (i, object) in [10, 11, 10, 12, 11].into_iter().enumerate() {
        messages.push(org(
            OutboxCategory::OrganizationUpdate,
            1,
            object,
            json!({ "i": i }),
        ));
        messages.push(org(
            OutboxCategory::OrganizationMemberUpdate,
            2,
            object,
            json!({ "i": i }),
        ));
        messages.push(OutboxMessage::new(OutboxCategory::UserUpdate, 3, object));
    }
    write_region_many(&t.db, messages).await.unwrap();
    let recorder = Recorder::new();
    let drainer = Drainer::new(t.store(), recorder.receivers())
        .with_config(DrainConfig::default().batch_size(2));
    outbox_core::testing::drain_until_idle(&drainer, &[OutboxKind::Region])
        .await
        .unwrap();

    let deliveries = recorder.deliveries();
    for identifier in [1, 2, 3] {
        let firsts: Vec<i64> = deliveries
            .iter()
            .filter(|d| d.shard.identifier() == identifier)
            .map(|d| d.first_id)
            .collect();
        let mut sorted = firsts.clone();
        sorted.sort_unstable();
        assert_eq!(firsts, sorted, "shard {identifier} delivered out of order");
        assert!(!firsts.is_empty());
    }
    assert_eq!(
        t.store().pending_count(OutboxKind::Region).await.unwrap(),
        0
    );
}

async fn five_writes_deliver_once_with_the_newest_payload(backend: DbBackend) {
    let t = database(backend, "coalesce").await;
    for v in 1..=5 {
        let txn = t.db.begin().await.unwrap();
        write_region(
            &txn,
            org(OutboxCategory::OrganizationUpdate, 1, 77, json!({ "v": v })),
        )
        .await
        .unwrap();
        txn.commit().await.unwrap();
    }
    let recorder = Recorder::new();
    let drainer = Drainer::new(t.store(), recorder.receivers());
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.deliveries, report.rows_deleted), (1, 5));
    let deliveries = recorder.deliveries();
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0].payload, Some(json!({ "v": 5 })));
    assert_eq!(deliveries[0].coalesced, 5);
}

async fn a_write_during_delivery_survives_and_is_delivered_next(backend: DbBackend) {
    let t = database(backend, "coalesce_race").await;
    for v in 1..=5 {
        write_region(
            &t.db,
            org(OutboxCategory::OrganizationUpdate, 1, 77, json!({ "v": v })),
        )
        .await
        .unwrap();
    }
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let db = t.db.clone();
    let receivers = Receivers::new()
        .on(OutboxCategory::OrganizationUpdate, {
            let seen = seen.clone();
            move |message: Message<OutboxCategory>| {
                let seen = seen.clone();
                let db = db.clone();
                async move {
                    let v = message.payload.as_ref().unwrap()["v"].as_i64().unwrap();
                    seen.lock().unwrap().push(v);
                    if v == 5 {
                        // Lands while the group is being delivered.
                        write_region(
                            &db,
                            org(OutboxCategory::OrganizationUpdate, 1, 77, json!({ "v": 6 })),
                        )
                        .await?;
                    }
                    Ok::<_, HandlerError>(())
                }
            }
        })
        .discard(OutboxCategory::OrganizationMemberUpdate)
        .discard(OutboxCategory::UserUpdate)
        .discard(OutboxCategory::AuditLogEvent);
    let drainer = Drainer::new(t.store(), receivers);
    let first = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(first.rows_deleted, 5);
    assert_eq!(
        t.store().pending_count(OutboxKind::Region).await.unwrap(),
        1
    );
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![5, 6]);
    assert_eq!(
        t.store().pending_count(OutboxKind::Region).await.unwrap(),
        0
    );
}

async fn failing_receiver_backs_off_its_whole_shard(backend: DbBackend) {
    let t = database(backend, "backoff").await;
    let store = t.store();
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    recorder.fail_when(|m| m.shard_identifier() == 1);
    let policy = BackoffPolicy::new(Duration::from_secs(1), Duration::from_secs(8));
    let drainer = Drainer::new(store.clone(), recorder.receivers())
        .with_clock(clock.clone())
        .with_config(DrainConfig::default().backoff(policy));
    write_region_many(
        &t.db,
        [
            org(OutboxCategory::OrganizationUpdate, 1, 100, json!({})),
            org(OutboxCategory::OrganizationMemberUpdate, 1, 101, json!({})),
            org(OutboxCategory::OrganizationUpdate, 2, 200, json!({})),
        ],
    )
    .await
    .unwrap();
    let failing = ShardKey::region(OutboxScope::OrganizationScope, 1);

    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.failures.len(), 1);
    assert_eq!(report.failures[0].shard, failing);
    assert!(matches!(
        report.failures[0].error,
        DeliveryError::Handler(_)
    ));
    assert_eq!(report.deliveries, 1, "the healthy shard keeps flowing");

    for (round, expected) in [1u64, 2, 4, 8, 8].into_iter().enumerate() {
        let rows = store
            .read_rows(
                OutboxKind::Region,
                &[ShardRead {
                    shard: failing.clone(),
                    up_to_id: None,
                }],
                10,
            )
            .await
            .unwrap();
        assert_eq!(
            rows.len(),
            2 + round,
            "nothing of the failing shard is lost"
        );
        for row in &rows {
            assert_eq!(
                (row.scheduled_for - row.scheduled_from).num_milliseconds(),
                (expected * 1000) as i64,
                "every row of the shard is rescheduled by the same delay"
            );
        }
        // A new row in the backing-off shard does not bypass the backoff.
        write_region(
            &t.db,
            org(OutboxCategory::OrganizationMemberUpdate, 1, 101, json!({})),
        )
        .await
        .unwrap();
        clock.advance(Duration::from_millis(expected * 1000 - 10));
        let early = drainer.drain_due(OutboxKind::Region).await.unwrap();
        assert_eq!(early.shards, 0, "not due before its retry time");
        clock.advance(Duration::from_millis(10));
        let retry = drainer.drain_due(OutboxKind::Region).await.unwrap();
        assert_eq!(retry.failures.len(), 1);
    }
    assert_eq!(recorder.calls(), 1 + 1 + 5);

    recorder.stop_failing();
    clock.advance(Duration::from_secs(8));
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert!(report.failures.is_empty());
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
    let order: Vec<i64> = recorder
        .deliveries()
        .iter()
        .filter(|d| d.shard == failing)
        .map(|d| d.object)
        .collect();
    assert_eq!(order, vec![100, 101], "one delivery per group, in order");
}

async fn parallel_drains_never_share_a_shard(backend: DbBackend) {
    let t = database(backend, "parallel").await;
    let mut messages = Vec::new();
    for i in 0..400 {
        messages.push(org(
            OutboxCategory::OrganizationUpdate,
            i % 40,
            i,
            json!({ "i": i }),
        ));
    }
    write_region_many(&t.db, messages).await.unwrap();
    let recorder = Recorder::new();
    recorder.yield_inside(true);
    let config = DrainConfig::default()
        .shards_per_claim(8)
        .batch_size(3)
        .concurrency(4);
    let mut tasks = Vec::new();
    for worker in 0..2 {
        let db = t.connect_again(5).await.unwrap();
        let drainer = Drainer::new(
            outbox_seaorm::SeaOrmStore::new(db).unwrap(),
            recorder.receivers(),
        )
        .with_config(config)
        .with_owner(format!("worker-{worker}"));
        tasks.push(tokio::spawn(async move {
            for _ in 0..500 {
                let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
                assert!(report.failures.is_empty());
                if drainer
                    .store()
                    .pending_count(OutboxKind::Region)
                    .await
                    .unwrap()
                    == 0
                {
                    break;
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(recorder.overlaps(), 0);
    assert_eq!(
        t.store().pending_count(OutboxKind::Region).await.unwrap(),
        0
    );
    let mut objects: Vec<i64> = recorder.deliveries().iter().map(|d| d.object).collect();
    objects.sort_unstable();
    objects.dedup();
    assert_eq!(objects.len(), 400, "every message delivered");
}

/// Worker A: starts a round and returns once it is inside its receiver of
/// `OrganizationUpdate`, with the round and what lets that receiver return.
async fn a_round_stuck_in_its_receiver(
    t: &TestDatabase,
    clock: &ManualClock,
    config: DrainConfig,
) -> (
    tokio::task::JoinHandle<Result<DrainReport, StoreError>>,
    Arc<tokio::sync::Notify>,
) {
    let entered = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let receivers = Receivers::new()
        .on(OutboxCategory::OrganizationUpdate, {
            let (entered, release) = (entered.clone(), release.clone());
            move |_message: Message<OutboxCategory>| {
                let (entered, release) = (entered.clone(), release.clone());
                async move {
                    entered.notify_one();
                    release.notified().await;
                    Ok::<_, HandlerError>(())
                }
            }
        })
        .discard(OutboxCategory::OrganizationMemberUpdate)
        .discard(OutboxCategory::UserUpdate)
        .discard(OutboxCategory::AuditLogEvent);
    let worker_a = Drainer::new(t.store(), receivers)
        .with_clock(clock.clone())
        .with_config(config);
    let round = tokio::spawn(async move { worker_a.drain_due(OutboxKind::Region).await });
    entered.notified().await;
    (round, release)
}

async fn expired_claim_is_taken_over_and_the_stale_worker_is_fenced(backend: DbBackend) {
    let t = database(backend, "fencing").await;
    let clock = ManualClock::starting_now();
    let config = DrainConfig::default().lease(Duration::from_secs(30));
    let row = write_region(
        &t.db,
        org(OutboxCategory::OrganizationUpdate, 1, 1, json!({})),
    )
    .await
    .unwrap();

    // Worker A enters the receiver and hangs there.
    let (stale, release) = a_round_stuck_in_its_receiver(&t, &clock, config).await;

    // While A's lease holds, nobody else gets the shard.
    let recorder = Recorder::new();
    recorder.fail_when(|_| true);
    let worker_b = Drainer::new(t.store(), recorder.receivers())
        .with_clock(clock.clone())
        .with_config(config);
    assert_eq!(
        worker_b.drain_due(OutboxKind::Region).await.unwrap().shards,
        0
    );
    assert!(matches!(
        worker_b
            .with_config(config.sync_wait(Duration::from_millis(20)))
            .drain_shard(&row.shard, None)
            .await,
        Err(FlushError::ShardBusy { .. })
    ));

    // A's lease expires: B takes over (and fails, so the row stays).
    clock.advance(Duration::from_secs(31));
    let worker_b = Drainer::new(t.store(), recorder.receivers())
        .with_clock(clock.clone())
        .with_config(config);
    let report = worker_b.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.shards, report.failures.len()), (1, 1));

    // A finishes its delivery late: its commit is fenced off and deletes nothing.
    release.notify_one();
    let stale_report = stale.await.unwrap().unwrap();
    assert_eq!(stale_report.lost_claims, vec![row.shard.clone()]);
    assert_eq!(stale_report.rows_deleted, 0);
    assert_eq!(
        t.store().pending_count(OutboxKind::Region).await.unwrap(),
        1
    );

    // B, fixed, finishes the shard after its backoff.
    recorder.stop_failing();
    clock.advance(Duration::from_secs(2));
    let report = worker_b.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 1);
    assert_eq!(
        t.store().pending_count(OutboxKind::Region).await.unwrap(),
        0
    );
}

/// `Store::expire_claims`, what `Drainer::release_abandoned` calls for the
/// claims of a cancelled round: the shard is free at once, the old token is
/// fenced off, and a shard backing off stays backing off.
async fn expired_claims_free_their_shards_fence_their_token_and_keep_backoffs(backend: DbBackend) {
    use outbox_seaorm::entity::outbox_shard_claim;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let t = database(backend, "expire_claims").await;
    let clock = ManualClock::starting_now();
    let config = DrainConfig::default().lease(Duration::from_secs(3600));
    // Shard 2 fails once and backs off (for a second).
    write_region(
        &t.db,
        org(OutboxCategory::OrganizationUpdate, 2, 20, json!({})),
    )
    .await
    .unwrap();
    let recorder = Recorder::new();
    recorder.fail_when(|_| true);
    let failing = Drainer::new(t.store(), recorder.receivers())
        .with_clock(clock.clone())
        .with_config(config);
    assert_eq!(
        failing
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .failures
            .len(),
        1
    );
    recorder.stop_failing();

    // Worker A claims shard 3 and hangs in its receiver.
    let row = write_region(
        &t.db,
        org(OutboxCategory::OrganizationUpdate, 3, 30, json!({})),
    )
    .await
    .unwrap();
    let (stale, release) = a_round_stuck_in_its_receiver(&t, &clock, config).await;
    let claim = outbox_shard_claim::Entity::find()
        .filter(outbox_shard_claim::Column::ShardIdentifier.eq(3))
        .one(&t.db)
        .await
        .unwrap()
        .unwrap();

    // Its claims end now, not in an hour.
    let now = outbox_core::Clock::now(&clock);
    let store = t.store();
    assert_eq!(
        store
            .expire_claims(OutboxKind::Region, claim.token, now)
            .await
            .unwrap(),
        1,
        "only A's live claim: shard 2's backoff is not a live claim"
    );
    let worker_b = Drainer::new(t.store(), recorder.receivers())
        .with_clock(clock.clone())
        .with_config(config);
    let report = worker_b.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(
        (report.shards, report.deliveries),
        (1, 1),
        "B takes shard 3 at once; shard 2 still backs off"
    );
    assert_eq!(recorder.deliveries()[0].object, 30);

    // A finishes late: fenced off, it deletes nothing (B already did).
    release.notify_one();
    let stale_report = stale.await.unwrap().unwrap();
    assert_eq!(stale_report.lost_claims, vec![row.shard.clone()]);
    assert_eq!(stale_report.rows_deleted, 0);

    // Shard 2's backoff was kept: due only after its delay.
    let backoff = outbox_shard_claim::Entity::find()
        .filter(outbox_shard_claim::Column::ShardIdentifier.eq(2))
        .one(&t.db)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((backoff.owner, backoff.attempts), (None, 1));
    clock.advance(Duration::from_secs(2));
    let report = worker_b.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 1);
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

async fn a_worker_dropped_mid_delivery_is_replaced_after_its_lease(backend: DbBackend) {
    let t = database(backend, "crash").await;
    let clock = ManualClock::starting_now();
    let config = DrainConfig::default().lease(Duration::from_secs(30));
    write_region(
        &t.db,
        org(OutboxCategory::OrganizationUpdate, 1, 1, json!({})),
    )
    .await
    .unwrap();
    let entered = Arc::new(tokio::sync::Notify::new());
    let receivers = Receivers::new()
        .on(OutboxCategory::OrganizationUpdate, {
            let entered = entered.clone();
            move |_message: Message<OutboxCategory>| {
                let entered = entered.clone();
                async move {
                    entered.notify_one();
                    std::future::pending::<()>().await;
                    Ok::<_, HandlerError>(())
                }
            }
        })
        .discard(OutboxCategory::OrganizationMemberUpdate)
        .discard(OutboxCategory::UserUpdate)
        .discard(OutboxCategory::AuditLogEvent);
    let crashing = Drainer::new(t.store(), receivers)
        .with_clock(clock.clone())
        .with_config(config);
    let task = tokio::spawn(async move { crashing.drain_due(OutboxKind::Region).await });
    entered.notified().await;
    task.abort(); // the "crash": the future is dropped mid-delivery
    let _ = task.await;

    let recorder = Recorder::new();
    let successor = Drainer::new(t.store(), recorder.receivers())
        .with_clock(clock.clone())
        .with_config(config);
    assert_eq!(
        successor
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .shards,
        0
    );
    clock.advance(Duration::from_secs(31));
    let report = successor.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 1);
    assert_eq!(
        t.store().pending_count(OutboxKind::Region).await.unwrap(),
        0
    );
}

async fn kill_switch_culls_older_rows_and_delivers_nothing(backend: DbBackend) {
    let t = database(backend, "kill_switch").await;
    let clock = ManualClock::starting_now();
    for v in 1..=3 {
        write_region(
            &t.db,
            org(OutboxCategory::OrganizationUpdate, 1, 10, json!({ "v": v })),
        )
        .await
        .unwrap();
        write_region(
            &t.db,
            org(
                OutboxCategory::OrganizationMemberUpdate,
                1,
                11,
                json!({ "v": v }),
            ),
        )
        .await
        .unwrap();
    }
    write_region(
        &t.db,
        org(OutboxCategory::OrganizationUpdate, 2, 20, json!({})),
    )
    .await
    .unwrap();
    let kill_switch = KillSwitch::new();
    kill_switch.skip(OutboxScope::OrganizationScope, 1);
    let recorder = Recorder::new();
    let drainer = Drainer::new(t.store(), recorder.receivers())
        .with_clock(clock.clone())
        .with_kill_switch(kill_switch.clone());
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.culled, 4);
    assert_eq!(
        recorder.deliveries().len(),
        1,
        "only the other shard delivered"
    );
    assert_eq!(
        t.store().pending_count(OutboxKind::Region).await.unwrap(),
        2
    );

    kill_switch.resume(OutboxScope::OrganizationScope, 1);
    clock.advance(Duration::from_secs(2));
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    let payloads: Vec<_> = recorder
        .deliveries()
        .iter()
        .skip(1)
        .map(|d| d.payload.clone())
        .collect();
    assert_eq!(
        payloads,
        vec![Some(json!({ "v": 3 })), Some(json!({ "v": 3 }))]
    );
}

async fn unknown_category_holds_its_shard(backend: DbBackend) {
    let t = database(backend, "unknown").await;
    let clock = ManualClock::starting_now();
    use sea_orm::ConnectionTrait;
    // A row written by a newer binary, with a category this one does not know
    // (the column defaults make it due at once on both backends).
    t.db.execute_unprepared(
        "INSERT INTO region_outbox (shard_scope, shard_identifier, category, object_identifier) VALUES (0, 1, 999, 1)",
    )
    .await
    .unwrap();
    write_region(
        &t.db,
        org(OutboxCategory::OrganizationUpdate, 1, 2, json!({})),
    )
    .await
    .unwrap();
    write_region(
        &t.db,
        org(OutboxCategory::OrganizationUpdate, 2, 3, json!({})),
    )
    .await
    .unwrap();
    let recorder = Recorder::new();
    let drainer = Drainer::new(t.store(), recorder.receivers()).with_clock(clock.clone());
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.failures.len(), 1);
    assert!(matches!(
        report.failures[0].error,
        DeliveryError::UnknownCategory(outbox_core::UnknownCategory(999))
    ));
    assert!(report.failures[0]
        .error
        .to_string()
        .contains("unknown outbox category 999"));
    assert_eq!(recorder.deliveries().len(), 1, "the other shard flows");
    assert_eq!(
        t.store().pending_count(OutboxKind::Region).await.unwrap(),
        2,
        "nothing deleted"
    );
}

async fn synchronous_flush_delivers_up_to_its_id_and_names_failures(backend: DbBackend) {
    let t = database(backend, "sync_flush").await;
    let first = write_region(
        &t.db,
        org(OutboxCategory::OrganizationUpdate, 1, 1, json!({})),
    )
    .await
    .unwrap();
    let later = write_region(
        &t.db,
        org(OutboxCategory::OrganizationMemberUpdate, 1, 2, json!({})),
    )
    .await
    .unwrap();
    let recorder = Recorder::new();
    let drainer = Drainer::new(t.store(), recorder.receivers());
    let report = drainer
        .drain_shard(&first.shard, Some(first.id))
        .await
        .unwrap();
    assert_eq!(report.deliveries, 1);
    assert!(recorder.deliveries()[0].synchronous);
    assert_eq!(
        t.store().pending_count(OutboxKind::Region).await.unwrap(),
        1
    );

    recorder.fail_when(|_| true);
    let error = drainer
        .drain_shard(&later.shard, Some(later.id))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(text.contains("OrganizationMemberUpdate"), "{text}");
    assert!(text.contains("region:0/1"), "{text}");
    assert!(
        text.contains(&format!("receiver refused {}", later.id)),
        "{text}"
    );
    assert_eq!(
        t.store().pending_count(OutboxKind::Region).await.unwrap(),
        1,
        "left for the background drain"
    );
}

async fn inspection_reports_depths_and_age(backend: DbBackend) {
    let t = database(backend, "inspect").await;
    let store = t.store();
    assert_eq!(
        store.oldest_pending(OutboxKind::Region).await.unwrap(),
        None
    );
    let mut messages = Vec::new();
    for i in 0..5 {
        messages.push(org(OutboxCategory::OrganizationUpdate, 1, i, json!({})));
    }
    for i in 0..2 {
        messages.push(org(OutboxCategory::OrganizationUpdate, 2, i, json!({})));
    }
    messages.push(org(OutboxCategory::OrganizationUpdate, 3, 0, json!({})));
    let before = chrono::Utc::now();
    write_region_many(&t.db, messages).await.unwrap();
    write_control(
        &t.db,
        ["us"],
        OutboxMessage::new(OutboxCategory::UserUpdate, 4, 4),
    )
    .await
    .unwrap();
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 8);
    let depths = store.shard_depths(OutboxKind::Region, 10).await.unwrap();
    let shape: Vec<(i64, u64)> = depths
        .iter()
        .map(|d| (d.shard.identifier(), d.depth))
        .collect();
    assert_eq!(shape, vec![(1, 5), (2, 2), (3, 1)]);
    let oldest = store
        .oldest_pending(OutboxKind::Region)
        .await
        .unwrap()
        .unwrap();
    assert!(oldest >= before - chrono::Duration::seconds(1));
    let control = store.shard_depths(OutboxKind::Control, 10).await.unwrap();
    assert_eq!(
        control[0].shard,
        ShardKey::control("us", OutboxScope::UserScope, 4)
    );
}

async fn cascading_receivers_drain_until_idle_or_hit_the_limit(backend: DbBackend) {
    let t = database(backend, "cascade").await;
    let db = t.db.clone();
    // Each UserUpdate writes an audit event; each audit event below 3 writes another.
    let receivers = Receivers::new()
        .on(OutboxCategory::UserUpdate, {
            let db = db.clone();
            move |message: Message<OutboxCategory>| {
                let db = db.clone();
                async move {
                    write_region(
                        &db,
                        OutboxMessage::new(
                            OutboxCategory::AuditLogEvent,
                            message.object_identifier,
                            1,
                        )
                        .with_payload(json!({ "depth": 1 })),
                    )
                    .await?;
                    Ok::<_, HandlerError>(())
                }
            }
        })
        .on(OutboxCategory::AuditLogEvent, {
            let db = db.clone();
            move |message: Message<OutboxCategory>| {
                let db = db.clone();
                async move {
                    let depth = message.payload.as_ref().unwrap()["depth"].as_i64().unwrap();
                    let limit = message.shard_identifier();
                    if depth < limit {
                        write_region(
                            &db,
                            OutboxMessage::new(OutboxCategory::AuditLogEvent, limit, depth + 1)
                                .with_payload(json!({ "depth": depth + 1 })),
                        )
                        .await?;
                    }
                    Ok::<_, HandlerError>(())
                }
            }
        })
        .discard(OutboxCategory::OrganizationUpdate)
        .discard(OutboxCategory::OrganizationMemberUpdate);
    let drainer = Drainer::new(t.store(), receivers);
    write_region(&t.db, OutboxMessage::new(OutboxCategory::UserUpdate, 3, 3))
        .await
        .unwrap();
    let report = outbox_core::testing::drain_until_idle(&drainer, &[OutboxKind::Region])
        .await
        .unwrap();
    assert_eq!(report.deliveries, 4);

    write_region(
        &t.db,
        OutboxMessage::new(OutboxCategory::UserUpdate, 50, 50),
    )
    .await
    .unwrap();
    let error = outbox_core::testing::drain_until_idle(&drainer, &[OutboxKind::Region])
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            outbox_core::testing::RunnerError::RecursionLimit { rounds: 10 }
        ),
        "{error}"
    );
}

/// A shard that backs off in one round keeps its backoff (attempts, delay,
/// retry time) when the other shards of the same claim finish in a later
/// round: ending those claims must not end the backoff that shares their token.
async fn a_backoff_survives_the_release_of_its_batch_mates_in_a_later_round(backend: DbBackend) {
    use outbox_seaorm::entity::outbox_shard_claim;
    use sea_orm::EntityTrait;
    let t = database(backend, "backoff_survives").await;
    write_region(
        &t.db,
        org(OutboxCategory::OrganizationUpdate, 1, 1, json!({})),
    )
    .await
    .unwrap();
    for object in 1..=3 {
        write_region(
            &t.db,
            org(OutboxCategory::OrganizationUpdate, 2, object, json!({})),
        )
        .await
        .unwrap();
    }
    let recorder = Recorder::new();
    recorder.fail_when(|m| m.shard_identifier() == 1);
    let clock = ManualClock::starting_now();
    // One row per shard and round: shard 2 needs rounds after shard 1 failed.
    let drainer = Drainer::new(t.store(), recorder.receivers())
        .with_clock(clock.clone())
        .with_config(DrainConfig::default().batch_size(1));
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.failures.len(), report.deliveries), (1, 3));
    let claims = outbox_shard_claim::Entity::find().all(&t.db).await.unwrap();
    let backoffs: Vec<_> = claims
        .iter()
        .map(|c| (c.shard_identifier, c.owner.as_deref(), c.attempts))
        .collect();
    assert_eq!(backoffs, vec![(1, None, 1)], "shard 1's backoff is kept");
    // Not due before its retry time, even though its batch mates are done.
    clock.advance(Duration::from_millis(900));
    assert_eq!(
        drainer.drain_due(OutboxKind::Region).await.unwrap().shards,
        0
    );
    // The second failure doubles the delay, as it should.
    clock.advance(Duration::from_millis(100));
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.failures.len(), 1);
    let claim = &outbox_shard_claim::Entity::find().all(&t.db).await.unwrap()[0];
    assert_eq!((claim.attempts, claim.last_backoff_ms), (2, Some(2000)));
}

async fn entities_show_rows_and_a_failing_shards_backoff(backend: DbBackend) {
    use outbox_seaorm::entity::{control_outbox, outbox_shard_claim, region_outbox};
    use sea_orm::EntityTrait;
    let t = database(backend, "entities").await;
    let row = write_region(
        &t.db,
        org(OutboxCategory::OrganizationUpdate, 3, 4, json!({ "a": 1 })),
    )
    .await
    .unwrap();
    write_control(
        &t.db,
        ["us"],
        OutboxMessage::new(OutboxCategory::UserUpdate, 5, 6),
    )
    .await
    .unwrap();
    let stored = region_outbox::Entity::find_by_id(row.id)
        .one(&t.db)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            stored.shard_scope,
            stored.shard_identifier,
            stored.category,
            stored.object_identifier
        ),
        (0, 3, 1, 4)
    );
    assert_eq!(stored.payload, Some(json!({ "a": 1 })));
    assert_eq!(stored.scheduled_for, outbox_core::the_past());
    let control = control_outbox::Entity::find().all(&t.db).await.unwrap();
    assert_eq!(control[0].region_name, "us");

    let recorder = Recorder::new();
    recorder.fail_when(|_| true);
    Drainer::new(t.store(), recorder.receivers())
        .drain_due(OutboxKind::Region)
        .await
        .unwrap();
    let claims = outbox_shard_claim::Entity::find().all(&t.db).await.unwrap();
    assert_eq!(claims.len(), 1);
    assert_eq!(
        (
            claims[0].owner.as_deref(),
            claims[0].attempts,
            claims[0].last_backoff_ms
        ),
        (None, 1, Some(1000))
    );
    assert!(claims[0]
        .last_error
        .as_deref()
        .unwrap()
        .contains("receiver refused"));
}

async fn an_opted_in_scope_dead_letters_and_replays(backend: DbBackend) {
    let t = database(backend, "dead_letter").await;
    let store = t.store();
    let clock = ManualClock::starting_now();
    let poison = write_region(
        &t.db,
        org(
            OutboxCategory::OrganizationUpdate,
            1,
            1,
            json!({ "poison": true }),
        ),
    )
    .await
    .unwrap();
    write_region(
        &t.db,
        org(OutboxCategory::OrganizationMemberUpdate, 1, 2, json!({})),
    )
    .await
    .unwrap();
    write_control(
        &t.db,
        ["us"],
        OutboxMessage::new(OutboxCategory::UserUpdate, 5, 5)
            .with_payload(json!({ "poison": true })),
    )
    .await
    .unwrap();
    let recorder = Recorder::new();
    recorder.fail_when(|m| m.payload.as_ref().is_some_and(|p| p["poison"] == true));
    let drainer = Drainer::new(store.clone(), recorder.receivers())
        .with_clock(clock.clone())
        .with_dead_letter(OutboxScope::OrganizationScope, 2);

    let first = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert!(!first.failures[0].dead_lettered);
    clock.advance(Duration::from_secs(3600));
    let second = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert!(second.failures[0].dead_lettered);
    assert_eq!(
        (second.dead_lettered, second.deliveries),
        (1, 1),
        "moved aside, and the shard went on"
    );
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
    let dead = store.dead_letters(OutboxKind::Region, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].row.id, dead[0].row.payload.clone()),
        (poison.id, Some(json!({ "poison": true })))
    );
    assert!(
        dead[0].error.contains("receiver refused"),
        "{}",
        dead[0].error
    );

    // The control scope did not opt in: it keeps retrying.
    for _ in 0..3 {
        let report = drainer.drain_due(OutboxKind::Control).await.unwrap();
        assert!(report.failures.iter().all(|f| !f.dead_lettered));
        clock.advance(Duration::from_secs(3600));
    }
    assert_eq!(store.pending_count(OutboxKind::Control).await.unwrap(), 1);

    // Fixed, replayed, delivered.
    recorder.stop_failing();
    assert_eq!(
        store
            .replay_dead_letters(OutboxKind::Region, &[poison.id])
            .await
            .unwrap(),
        1
    );
    assert!(store
        .dead_letters(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 1);
    assert_eq!(recorder.deliveries().last().unwrap().id, poison.id);
}

outbox_seaorm::on_both_backends!(
    an_opted_in_scope_dead_letters_and_replays,
    entities_show_rows_and_a_failing_shards_backoff,
    rolled_back_transaction_writes_no_row,
    committed_transaction_writes_exactly_its_rows,
    groups_are_delivered_in_order_of_their_lowest_id,
    five_writes_deliver_once_with_the_newest_payload,
    a_write_during_delivery_survives_and_is_delivered_next,
    failing_receiver_backs_off_its_whole_shard,
    parallel_drains_never_share_a_shard,
    expired_claim_is_taken_over_and_the_stale_worker_is_fenced,
    expired_claims_free_their_shards_fence_their_token_and_keep_backoffs,
    a_backoff_survives_the_release_of_its_batch_mates_in_a_later_round,
    a_worker_dropped_mid_delivery_is_replaced_after_its_lease,
    kill_switch_culls_older_rows_and_delivers_nothing,
    unknown_category_holds_its_shard,
    synchronous_flush_delivers_up_to_its_id_and_names_failures,
    inspection_reports_depths_and_age,
    cascading_receivers_drain_until_idle_or_hit_the_limit,
);
