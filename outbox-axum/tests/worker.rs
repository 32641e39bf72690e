//! The background drain: start-up checks, wake-ups, outages, shutdown.

#![allow(clippy::unwrap_used, missing_docs)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use outbox_axum::{OutboxWorker, WorkerError};
use outbox_core::store::StoreAdmin;
use outbox_core::{HandlerError, Message, OutboxContext, OutboxKind, Receivers};
use outbox_seaorm::{listener, write_region, ObjectId, OutboxMessage, ShardId};
use outbox_testing::database::{
    restart_cluster_at, start_cluster_at, stop_cluster_at, TestDatabase,
};
use sea_orm::{DbBackend, TransactionTrait};
use support::{OutboxCategory, Recorder, TestApp};

fn message(org: i64, object: i64) -> OutboxMessage<OutboxCategory> {
    OutboxMessage::new(
        OutboxCategory::OrganizationUpdate,
        ShardId(org),
        ObjectId(object),
    )
}

#[tokio::test]
async fn the_worker_refuses_to_start_with_a_category_unhandled() {
    let db = TestDatabase::sqlite("worker_refuses").await.unwrap();
    let receivers = Receivers::new().discard(OutboxCategory::OrganizationUpdate);
    let error = OutboxWorker::builder(db.db.clone(), receivers)
        .spawn()
        .await
        .unwrap_err();
    assert!(matches!(error, WorkerError::IncompleteReceivers(_)));
    let text = error.to_string();
    assert!(
        text.contains("no receiver for [OrganizationAudit]"),
        "{text}"
    );
}

/// Forgetting the migrations stops the application at `spawn`, with an error
/// that names the missing table and how to run them, instead of a worker
/// that logs `no such table` forever. Nothing is started.
async fn the_worker_refuses_to_start_without_the_migrations(backend: DbBackend) {
    use sea_orm_migration::MigratorTrait;
    let db = TestDatabase::of(backend, "worker_unmigrated")
        .await
        .unwrap();
    outbox_migrations::OutboxMigrator::down(&db.db, None)
        .await
        .unwrap();
    let receivers = || {
        Receivers::new()
            .discard(OutboxCategory::OrganizationUpdate)
            .discard(OutboxCategory::OrganizationAudit)
    };
    let error = OutboxWorker::builder(db.db.clone(), receivers())
        .spawn()
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, WorkerError::Schema(_)), "{text}");
    for needed in [
        "table `region_outbox` does not exist",
        "m20261121_000001_create_outbox_tables",
        "outbox_migrations::migrations()",
        "OutboxMigrator::up(&db, None)",
    ] {
        assert!(text.contains(needed), "`{needed}` not in: {text}");
    }

    // Half-way (an old deployment's migrations): the first one missing.
    outbox_migrations::OutboxMigrator::up(&db.db, Some(3))
        .await
        .unwrap();
    let text = OutboxWorker::builder(db.db.clone(), receivers())
        .spawn()
        .await
        .unwrap_err()
        .to_string();
    // The later migrations the check can see missing (not the
    // settings-only autovacuum one, nor an index drop whose index this
    // early schema never had).
    assert!(
        text.contains("table `outbox_claim_bucket` does not exist")
            && text.contains("m20261123_000004_bucket_claims")
            && text.contains("nor have the 10 after it"),
        "{text}"
    );
    // The later ones are checked too: the audit log's table.
    outbox_migrations::OutboxMigrator::up(&db.db, Some(9))
        .await
        .unwrap();
    let text = OutboxWorker::builder(db.db.clone(), receivers())
        .spawn()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("m20261126_000013_operator_audit")
            && text.contains("nor have the 2 after it"),
        "{text}"
    );
    // One behind: the payload version's column.
    outbox_migrations::OutboxMigrator::up(&db.db, None)
        .await
        .unwrap();
    outbox_migrations::OutboxMigrator::down(&db.db, Some(1))
        .await
        .unwrap();
    let text = OutboxWorker::builder(db.db.clone(), receivers())
        .spawn()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("m20261128_000016_payload_version") && !text.contains("after it"),
        "{text}"
    );

    outbox_migrations::OutboxMigrator::up(&db.db, None)
        .await
        .unwrap();
    let worker = OutboxWorker::builder(db.db.clone(), receivers())
        .spawn()
        .await
        .unwrap();
    worker.ready().await;
    worker.shutdown().await;
}

async fn polling_finds_rows_nobody_announced(backend: DbBackend) {
    let app = TestApp::new(backend, "worker_poll").await;
    let worker = OutboxWorker::builder(app.db.db.clone(), app.recorder.receivers())
        .listen(false)
        .poll_interval(Duration::from_millis(50))
        .spawn()
        .await
        .unwrap();
    worker.ready().await;
    // Written outside any context, with no wake-up at all.
    write_region(&app.db.db, message(1, 1)).await.unwrap();
    assert!(app.recorder.wait_for(1, Duration::from_secs(20)).await);
    worker.shutdown().await;
}

async fn a_job_outside_http_uses_the_same_context(backend: DbBackend) {
    let app = TestApp::new(backend, "worker_job").await;
    let context = OutboxContext::new();
    context
        .scope(async {
            let txn = app.db.db.begin().await.unwrap();
            write_region(&txn, message(3, 1)).await.unwrap();
            write_region(&txn, message(4, 1)).await.unwrap();
            txn.commit().await.unwrap();
        })
        .await;
    let flushed = context.flush(&app.drainer).await;
    assert!(flushed.errors.is_empty());
    assert_eq!(flushed.report.deliveries, 2);
    assert!(app.recorder.deliveries().iter().all(|d| d.synchronous));
}

async fn graceful_shutdown_lets_deliveries_in_flight_finish(backend: DbBackend) {
    let app = TestApp::new(backend, "worker_shutdown").await;
    let entered = Arc::new(tokio::sync::Notify::new());
    let finish = Arc::new(tokio::sync::Notify::new());
    let recorder = app.recorder.clone();
    let receivers = Receivers::new()
        .on(OutboxCategory::OrganizationUpdate, {
            let (entered, finish) = (entered.clone(), finish.clone());
            move |message: Message<OutboxCategory>| {
                let (entered, finish, recorder) =
                    (entered.clone(), finish.clone(), recorder.clone());
                async move {
                    entered.notify_one();
                    // Still running when the shutdown begins.
                    finish.notified().await;
                    recorder.handle(message).await
                }
            }
        })
        .discard(OutboxCategory::OrganizationAudit);
    let worker = OutboxWorker::builder(app.db.db.clone(), receivers)
        .poll_interval(Duration::from_millis(20))
        .shutdown_timeout(Duration::from_secs(10))
        .spawn()
        .await
        .unwrap();
    write_region(&app.db.db, message(1, 1)).await.unwrap();
    entered.notified().await;
    let stopping = worker.stopping();
    let shutdown = tokio::spawn(worker.shutdown());
    stopping.cancelled().await;
    assert!(app.recorder.deliveries().is_empty(), "still in flight");
    finish.notify_one();
    shutdown.await.unwrap();
    assert_eq!(
        app.recorder.deliveries().len(),
        1,
        "the delivery in flight finished"
    );
    assert_eq!(app.pending().await, 0, "and its round committed");
    // Nothing claims after shutdown: a row written now is still there for
    // the next drain to claim and deliver.
    write_region(&app.db.db, message(1, 2)).await.unwrap();
    let report = app.drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 1, "{report:?}");
    assert_eq!(app.pending().await, 0);
}

/// Receivers whose first delivery hangs forever (after saying so), and that
/// record every other delivery.
fn hang_once(app: &TestApp, entered: Arc<tokio::sync::Notify>) -> Receivers<OutboxCategory> {
    let hang = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let recorder = app.recorder.clone();
    Receivers::new()
        .on(
            OutboxCategory::OrganizationUpdate,
            move |message: Message<OutboxCategory>| {
                let (hang, entered, recorder) = (hang.clone(), entered.clone(), recorder.clone());
                async move {
                    if hang.swap(false, std::sync::atomic::Ordering::SeqCst) {
                        entered.notify_one();
                        std::future::pending::<()>().await;
                    }
                    recorder.handle(message).await
                }
            },
        )
        .discard(OutboxCategory::OrganizationAudit)
}

/// An hour-long lease: only an explicit release lets anyone else in soon.
fn long_lease() -> outbox_core::DrainConfig {
    outbox_core::DrainConfig::default()
        .lease(Duration::from_secs(3600))
        .delivery_timeout(Duration::from_secs(1000))
}

async fn a_round_cut_off_at_shutdown_releases_its_claims(backend: DbBackend) {
    let app = TestApp::new(backend, "worker_cut_off").await;
    let entered = Arc::new(tokio::sync::Notify::new());
    let worker = OutboxWorker::builder(app.db.db.clone(), hang_once(&app, entered.clone()))
        .drain_config(long_lease())
        .poll_interval(Duration::from_millis(20))
        .shutdown_timeout(Duration::from_millis(200))
        .spawn()
        .await
        .unwrap();
    write_region(&app.db.db, message(1, 1)).await.unwrap();
    entered.notified().await;
    worker.shutdown().await; // cut off: the receiver never returns
    assert!(app.recorder.deliveries().is_empty());
    // Another process takes the shard at once, not an hour later.
    let report = app.drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.shards, report.deliveries), (1, 1));
    assert_eq!(app.pending().await, 0);
}

async fn a_flush_cancelled_by_its_client_frees_the_shard_for_the_worker(backend: DbBackend) {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;
    let app = TestApp::new(backend, "worker_flush_cancelled").await;
    let entered = Arc::new(tokio::sync::Notify::new());
    // The worker wakes only when told to, so the row is the flush's alone.
    let worker = OutboxWorker::builder(app.db.db.clone(), hang_once(&app, entered.clone()))
        .drain_config(long_lease())
        .poll_interval(Duration::from_secs(3600))
        .listen(false)
        .spawn()
        .await
        .unwrap();
    worker.ready().await;
    let router = app.routes().layer(worker.layer());
    let request =
        tokio::spawn(router.oneshot(Request::post("/widgets/7/w").body(Body::empty()).unwrap()));
    entered.notified().await; // committed; the flush is delivering
    request.abort(); // the client went away
    let _ = request.await;
    assert_eq!(app.widgets().await, 1, "the commit stands");
    // At its next round, the worker ends the cancelled flush's claim and
    // delivers the row.
    worker.waker().wake_local(OutboxKind::Region);
    assert!(
        app.recorder.wait_for(1, Duration::from_secs(20)).await,
        "delivered well before the hour-long lease ends"
    );
    worker.shutdown().await;
    assert_eq!(app.pending().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn notify_wakes_a_worker_of_another_process() {
    let app = TestApp::new(DbBackend::Postgres, "worker_notify").await;
    let worker = OutboxWorker::builder(app.db.db.clone(), app.recorder.receivers())
        .poll_interval(Duration::from_secs(3600))
        .spawn()
        .await
        .unwrap();
    worker.ready().await;
    // Another "process": its own pool, a deferred write, NOTIFY at commit.
    let other = app.db.connect_again(2).await.unwrap();
    let txn = other.begin().await.unwrap();
    write_region(&txn, message(9, 1)).await.unwrap();
    listener::notify(&txn, OutboxKind::Region).await.unwrap();
    txn.commit().await.unwrap();
    assert!(
        app.recorder.wait_for(1, Duration::from_secs(20)).await,
        "woken by NOTIFY (the poll interval is an hour)"
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_worker_recovers_after_postgres_restarts() {
    let dir = std::env::temp_dir().join(format!("outbox-restart-{}", std::process::id()));
    let admin = start_cluster_at(&dir, false).unwrap();
    let db = TestDatabase::postgres_on(&admin, "restart").await.unwrap();
    let recorder = Recorder::new();
    let worker = OutboxWorker::builder(db.db.clone(), recorder.receivers())
        .poll_interval(Duration::from_millis(50))
        .spawn()
        .await
        .unwrap();
    write_region(&db.db, message(1, 1)).await.unwrap();
    assert!(recorder.wait_for(1, Duration::from_secs(20)).await);

    let restart_dir = dir.clone();
    tokio::task::spawn_blocking(move || restart_cluster_at(&restart_dir).unwrap())
        .await
        .unwrap();
    // Writes resume once the server is back (the pool reconnects): nothing
    // to await but a write that works, tried again within the test pools'
    // acquire timeout (30 s), past which the pool would fail them anyway.
    let bound = Duration::from_secs(30);
    let started = std::time::Instant::now();
    let (mut written, mut attempt) = (0, 0);
    while written < 5 {
        attempt += 1;
        match write_region(&db.db, message(1 + attempt % 3, 100 + attempt)).await {
            Ok(_) => written += 1,
            Err(error) => {
                assert!(
                    started.elapsed() < bound,
                    "{written} of 5 writes after {:.1?} and {attempt} attempts (bound \
                     {bound:?}): {error}",
                    started.elapsed()
                );
                tokio::time::sleep(Duration::from_millis(50)).await; // retry interval
            }
        }
    }
    // Six distinct objects (a delivery whose commit the restart cut off is
    // made again: at least once, so count objects, not deliveries).
    let mut deliveries = 6;
    loop {
        assert!(
            recorder.wait_for(deliveries, Duration::from_secs(60)).await,
            "the drain recovered by itself and delivered everything"
        );
        let mut objects: Vec<i64> = recorder.deliveries().iter().map(|d| d.object).collect();
        objects.sort_unstable();
        objects.dedup();
        if objects.len() == 6 {
            break;
        }
        deliveries += 1;
    }
    worker.shutdown().await;
    assert_eq!(
        db.store().pending_count(OutboxKind::Region).await.unwrap(),
        0
    );
    db.db.close().await.unwrap();
    stop_cluster_at(&dir).unwrap();
}

async fn a_receiver_that_writes_outboxes_cascades_without_deadlock(backend: DbBackend) {
    let app = TestApp::new(backend, "worker_cascade").await;
    let db = app.db.db.clone();
    let drainer_slot: Arc<std::sync::Mutex<Option<outbox_core::Drainer<OutboxCategory>>>> =
        Arc::default();
    let recorder = app.recorder.clone();
    // Each update writes an audit row on its own shard and on another, in a
    // job-style context, and flushes both right away.
    let receivers = Receivers::new()
        .on(OutboxCategory::OrganizationUpdate, {
            let (db, slot, recorder) = (db.clone(), drainer_slot.clone(), recorder.clone());
            move |message: Message<OutboxCategory>| {
                let (db, slot, recorder) = (db.clone(), slot.clone(), recorder.clone());
                async move {
                    let context = OutboxContext::new();
                    context
                        .scope(async {
                            let txn = db.begin().await?;
                            let org = message.shard_identifier();
                            write_region(
                                &txn,
                                OutboxMessage::new(
                                    OutboxCategory::OrganizationAudit,
                                    ShardId(org),
                                    ObjectId(1),
                                ),
                            )
                            .await?;
                            write_region(
                                &txn,
                                OutboxMessage::new(
                                    OutboxCategory::OrganizationAudit,
                                    ShardId(org + 1),
                                    ObjectId(1),
                                ),
                            )
                            .await?;
                            txn.commit().await?;
                            Ok::<_, HandlerError>(())
                        })
                        .await?;
                    let drainer = slot.lock().unwrap().clone().unwrap();
                    let flushed = context.flush(&drainer).await;
                    assert!(flushed.errors.is_empty(), "{:?}", flushed.errors);
                    assert_eq!(
                        flushed.report.deferred, 1,
                        "its own shard is deferred, not deadlocked"
                    );
                    recorder.handle(message).await
                }
            }
        })
        .on(OutboxCategory::OrganizationAudit, {
            let recorder = recorder.clone();
            move |message: Message<OutboxCategory>| {
                let recorder = recorder.clone();
                async move { recorder.handle(message).await }
            }
        });
    let drainer = outbox_core::Drainer::new(
        outbox_seaorm::SeaOrmStore::new(app.db.db.clone()).unwrap(),
        receivers,
    );
    *drainer_slot.lock().unwrap() = Some(drainer.clone());
    let row = write_region(&app.db.db, message(10, 1)).await.unwrap();
    let report = tokio::time::timeout(
        Duration::from_secs(30),
        drainer.drain_shard(&row.shard, Some(row.id)),
    )
    .await
    .expect("no deadlock")
    .unwrap();
    assert_eq!(report.deliveries, 1);
    // The deferred audit row on the same shard is still there; the other was flushed.
    assert_eq!(app.pending().await, 1);
    outbox_testing::drain_until_idle(&drainer, &[OutboxKind::Region])
        .await
        .unwrap();
    assert_eq!(app.pending().await, 0);
    assert_eq!(app.recorder.deliveries().len(), 3);
}

/// With an inbox retention, the worker prunes the inbox at start (and
/// periodically), on its clock: rows older than the retention go, younger
/// ones stay.
async fn the_worker_prunes_the_inbox(backend: DbBackend) {
    use outbox_core::uuid::Uuid;
    use outbox_core::ManualClock;
    use outbox_seaorm::inbox::Inbox;

    let db = TestDatabase::of(backend, "worker_prunes_inbox")
        .await
        .unwrap();
    let clock = ManualClock::new(chrono::Utc::now());
    let inbox = Inbox::new("replica").with_clock(Arc::new(clock.clone()));
    let (old, recent) = (Uuid::now_v7(), Uuid::now_v7());
    inbox.receive(&db.db, old).await.unwrap();
    clock.advance(Duration::from_secs(2 * 3600));
    inbox.receive(&db.db, recent).await.unwrap();
    clock.advance(Duration::from_secs(1800));

    let receivers = Receivers::new()
        .discard(OutboxCategory::OrganizationUpdate)
        .discard(OutboxCategory::OrganizationAudit);
    let worker = OutboxWorker::builder(db.db.clone(), receivers)
        .clock(clock)
        .inbox_retention(Duration::from_secs(3600))
        .spawn()
        .await
        .unwrap();
    // Until the first pruning, at start, has removed the old row (nothing
    // to await: polled, with a bound far past a start's).
    let bound = Duration::from_secs(20);
    let started = std::time::Instant::now();
    while inbox.contains(&db.db, old).await.unwrap() {
        assert!(
            started.elapsed() < bound,
            "the inbox was not pruned {:.1?} after the worker started (bound {bound:?})",
            started.elapsed()
        );
        tokio::task::yield_now().await;
    }
    assert!(inbox.contains(&db.db, recent).await.unwrap());
    worker.shutdown().await;
}

outbox_testing::on_both_backends!(
    the_worker_prunes_the_inbox,
    the_worker_refuses_to_start_without_the_migrations,
    polling_finds_rows_nobody_announced,
    a_job_outside_http_uses_the_same_context,
    graceful_shutdown_lets_deliveries_in_flight_finish,
    a_receiver_that_writes_outboxes_cascades_without_deadlock,
    a_round_cut_off_at_shutdown_releases_its_claims,
    a_flush_cancelled_by_its_client_frees_the_shard_for_the_worker,
);

/// On tables migrated to the partition ring, the worker empties a partition
/// once the sequence has left it and its rows are delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_empties_drained_partitions_of_the_ring() {
    use sea_orm::ConnectionTrait;
    use sea_orm_migration::MigratorTrait;
    let app = TestApp::new(DbBackend::Postgres, "worker_ring").await;
    let db = &app.db.db;
    outbox_migrations::OutboxRingMigrator::up(db, None)
        .await
        .unwrap();
    let span = outbox_seaorm::ring::SPAN;
    db.execute_unprepared(&format!(
        "SELECT setval('region_outbox_ids', {}, false)",
        span - 2
    ))
    .await
    .unwrap();
    let worker = OutboxWorker::builder(db.clone(), app.recorder.receivers())
        .spawn()
        .await
        .unwrap();
    worker.ready().await;
    for object in 0..4 {
        write_region(db, message(1, object)).await.unwrap();
    }
    assert!(app.recorder.wait_for(4, Duration::from_secs(20)).await);
    // Two rows went to `_p0`, which the sequence has left: emptied at one
    // of the ring's runs, every `ring::INTERVAL` (nothing to await: polled,
    // for thirty of them).
    let bound = outbox_seaorm::ring::INTERVAL * 30;
    let started = std::time::Instant::now();
    loop {
        let row = db
            .query_one_raw(sea_orm::Statement::from_string(
                DbBackend::Postgres,
                "SELECT pg_relation_size('region_outbox_p0') AS bytes",
            ))
            .await
            .unwrap()
            .unwrap();
        if row.try_get::<i64>("", "bytes").unwrap() == 0 {
            break;
        }
        assert!(
            started.elapsed() < bound,
            "p0 not emptied {:.1?} after the deliveries (bound {bound:?}, 30 runs of the ring)",
            started.elapsed()
        );
        tokio::task::yield_now().await;
    }
    assert!(
        app.recorder.deliveries().len() >= 4,
        "every row delivered before its partition was emptied"
    );
    worker.shutdown().await;
}
