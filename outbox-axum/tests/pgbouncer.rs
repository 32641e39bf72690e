//! The outbox through a connection pooler: Debian's PgBouncer in session
//! mode, started by the test in front of the test cluster.

#![allow(clippy::unwrap_used, missing_docs)]

mod support;

use std::time::Duration;

use axum::http::StatusCode;
use outbox_axum::OutboxWorker;
use outbox_core::store::StoreAdmin;
use outbox_core::OutboxKind;
use outbox_seaorm::{listener, write_region, ObjectId, OutboxMessage, SeaOrmStore, ShardId};
use outbox_testing::database::{connect, PgBouncer, PoolMode};
use sea_orm::{ConnectionTrait, DbBackend, TransactionTrait};
use support::{send, OutboxCategory, TestApp};

/// Requests whose rows are flushed synchronously, requests that leave them to
/// the worker (woken by `NOTIFY`, its `LISTEN` connection through PgBouncer
/// too), and rows written by another process: all delivered, every statement
/// through the pooler.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_flush_the_drain_and_wake_ups_work_through_pgbouncer_in_session_mode() {
    let app = TestApp::new(DbBackend::Postgres, "pgbouncer").await;
    let bouncer = PgBouncer::start(&app.db.url, PoolMode::Session).unwrap();
    let pooled = connect(&bouncer.url_for(&app.db.url), 8).await.unwrap();
    let worker = OutboxWorker::builder(pooled.clone(), app.recorder.receivers())
        // Only a wake-up can deliver within the test: no poll comes in time.
        .poll_interval(Duration::from_secs(3600))
        .spawn()
        .await
        .unwrap();
    worker.ready().await;
    let router = app.routes().layer(worker.layer());

    // The synchronous flush: delivered before the response.
    let (status, _, flush) = send(router.clone(), "/widgets/1/flushed").await;
    assert_eq!((status, flush), (StatusCode::CREATED, None));
    assert_eq!(app.recorder.deliveries().len(), 1);

    // flush = false: the worker, woken through NOTIFY.
    let (status, _, _) = send(router.clone(), "/bulk/2/deferred").await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(app.recorder.wait_for(2, Duration::from_secs(30)).await);

    // Another process writes through PgBouncer too, and says so.
    let other = connect(&bouncer.url_for(&app.db.url), 2).await.unwrap();
    let txn = other.begin().await.unwrap();
    write_region(&txn, message(3, 3)).await.unwrap();
    listener::notify(&txn, OutboxKind::Region).await.unwrap();
    txn.commit().await.unwrap();
    assert!(app.recorder.wait_for(3, Duration::from_secs(30)).await);
    assert_eq!(app.recorder.overlaps(), 0);

    // Shutting down lets the rounds in flight commit.
    worker.shutdown().await;
    let store = SeaOrmStore::new(pooled.clone()).unwrap();
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
    other.close().await.unwrap();

    // It all went through the pooler: without it, that pool reaches nothing
    // (an error, or no answer within 5 s).
    drop(bouncer);
    let after = tokio::time::timeout(
        Duration::from_secs(5),
        pooled.execute_unprepared("SELECT 1"),
    );
    assert!(!matches!(after.await, Ok(Ok(_))));
}

fn message(org: i64, object: i64) -> OutboxMessage<OutboxCategory> {
    OutboxMessage::new(
        OutboxCategory::OrganizationUpdate,
        ShardId(org),
        ObjectId(object),
    )
}
