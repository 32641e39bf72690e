//! Process-level crashes on PostgreSQL: drain processes killed with SIGKILL in
//! the middle of deliveries, several times, while writes continue.

#![allow(clippy::unwrap_used, missing_docs)]

mod support;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use outbox_axum::OutboxWorker;
use outbox_core::{DrainConfig, HandlerError, Message, OutboxKind, Receivers, StoreAdmin};
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId};
use outbox_testing::database::{connect, TestDatabase};
use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};
use support::OutboxCategory;

const CHILD_DB: &str = "OUTBOX_CRASH_CHILD_DB";
const CHILD_FINAL: &str = "OUTBOX_CRASH_CHILD_FINAL";
const MESSAGES: i64 = 600;
const SHARDS: i64 = 20;
/// How long the last drain process may take to drain what is left.
const FINAL_DRAIN: Duration = Duration::from_secs(120);

/// The drain process the parent test starts and kills. It does nothing when
/// run on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of killed_drain_processes_lose_nothing_and_keep_order"]
async fn crash_child() {
    let Ok(url) = std::env::var(CHILD_DB) else {
        return;
    };
    let db = connect(&url, 6).await.unwrap();
    let log = connect(&url, 2).await.unwrap();
    let pid = std::process::id() as i64;
    let receivers = Receivers::new()
        .on(OutboxCategory::OrganizationUpdate, move |message: Message<OutboxCategory>| {
            let log = log.clone();
            async move {
                log.execute_raw(Statement::from_sql_and_values(
                    DbBackend::Postgres,
                    "INSERT INTO delivery_log (pid, shard, object, id, first_id) VALUES ($1, $2, $3, $4, $5)",
                    [pid.into(), message.shard_identifier().into(), message.object_identifier.into(), message.id.into(), message.first_id.into()],
                ))
                .await?;
                tokio::time::sleep(Duration::from_millis(2)).await; // widen the crash window
                Ok::<_, HandlerError>(())
            }
        })
        .discard(OutboxCategory::OrganizationAudit);
    let worker = OutboxWorker::builder(db.clone(), receivers)
        .drain_config(
            DrainConfig::default()
                .lease(Duration::from_secs(2))
                .batch_size(4),
        )
        .poll_interval(Duration::from_millis(20))
        .spawn()
        .await
        .unwrap();
    if std::env::var(CHILD_FINAL).is_ok() {
        // A stall fails the child (and so the parent's check of its exit)
        // instead of hanging the suite.
        let store = worker.drainer().view();
        let started = std::time::Instant::now();
        loop {
            let pending = store.pending_count(OutboxKind::Region).await.unwrap();
            if pending == 0 {
                break;
            }
            assert!(
                started.elapsed() < FINAL_DRAIN,
                "the last drain process left {pending} rows after {FINAL_DRAIN:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await; // poll interval
        }
        worker.shutdown().await;
    } else {
        std::future::pending::<()>().await; // until SIGKILL
    }
}

fn spawn_child(url: &str, last: bool) -> std::process::Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "crash_child",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_DB, url)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if last {
        command.env(CHILD_FINAL, "1");
    }
    command.spawn().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_drain_processes_lose_nothing_and_keep_order() {
    let db = TestDatabase::postgres("crash").await.unwrap();
    db.db
        .execute_unprepared(
            "CREATE TABLE delivery_log (seq bigserial PRIMARY KEY, pid bigint NOT NULL, shard bigint NOT NULL, \
             object bigint NOT NULL, id bigint NOT NULL, first_id bigint NOT NULL)",
        )
        .await
        .unwrap();

    // One writer, one transaction per message: ids commit in order.
    let writer_db = db.db.clone();
    let writer = tokio::spawn(async move {
        let mut written = Vec::new();
        for n in 0..MESSAGES {
            let txn = writer_db.begin().await.unwrap();
            let row = write_region(
                &txn,
                OutboxMessage::new(
                    OutboxCategory::OrganizationUpdate,
                    ShardId(n % SHARDS),
                    ObjectId(n % 7),
                ),
            )
            .await
            .unwrap();
            txn.commit().await.unwrap();
            written.push((row.id, n % SHARDS, n % 7));
            if n % 50 == 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        written
    });

    let mut kills = 0;
    for round in 0..5u64 {
        let mut child = spawn_child(&db.url, false);
        tokio::time::sleep(Duration::from_millis(250 + 70 * round)).await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
    }
    let written = writer.await.unwrap();
    let mut last = spawn_child(&db.url, true);
    let status = tokio::task::spawn_blocking(move || last.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "the final drain process failed");
    assert_eq!(kills, 5);

    let rows = db
        .db
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT pid, shard, object, id, first_id FROM delivery_log ORDER BY seq",
        ))
        .await
        .unwrap();
    let log: Vec<(i64, i64, i64, i64, i64)> = rows
        .iter()
        .map(|r| {
            (
                r.try_get("", "pid").unwrap(),
                r.try_get("", "shard").unwrap(),
                r.try_get("", "object").unwrap(),
                r.try_get("", "id").unwrap(),
                r.try_get("", "first_id").unwrap(),
            )
        })
        .collect();
    let pids: std::collections::HashSet<i64> = log.iter().map(|l| l.0).collect();
    assert!(
        pids.len() >= 3,
        "deliveries happened in several processes: {}",
        pids.len()
    );
    // Every message delivered at least once (as itself or coalesced into a newer row).
    for (id, shard, object) in &written {
        assert!(
            log.iter()
                .any(|l| l.1 == *shard && l.2 == *object && l.3 >= *id),
            "row {id} (shard {shard}, object {object}) was never delivered"
        );
    }
    // Order per shard within each process: groups in increasing lowest id.
    let mut last_first: HashMap<(i64, i64), i64> = HashMap::new();
    for (pid, shard, _, _, first_id) in &log {
        if let Some(previous) = last_first.insert((*pid, *shard), *first_id) {
            assert!(
                previous < *first_id,
                "process {pid} shard {shard}: {previous} then {first_id}"
            );
        }
    }
    assert_eq!(
        db.store().pending_count(OutboxKind::Region).await.unwrap(),
        0
    );
}
