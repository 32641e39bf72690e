//! Process-level crashes on PostgreSQL: drain processes killed with SIGKILL in
//! the middle of deliveries, several times, while writes continue.
//!
//! Each process is killed once it has made a number of deliveries (it says
//! so on its standard output), drawn from `OUTBOX_CRASH_SEED` (printed; set
//! it to replay a run's kill points): never after a sleep.

#![allow(clippy::unwrap_used, missing_docs)]

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use outbox_axum::OutboxWorker;
use outbox_core::store::StoreAdmin;
use outbox_core::{DrainConfig, HandlerError, Message, OutboxKind, Receivers};
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId};
use outbox_testing::database::{connect, TestDatabase};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement, TransactionTrait};
use support::OutboxCategory;
use tokio::sync::mpsc;

const CHILD_DB: &str = "OUTBOX_CRASH_CHILD_DB";
const CHILD_FINAL: &str = "OUTBOX_CRASH_CHILD_FINAL";
/// What a drain process prints after each delivery it logged.
const DELIVERED: &str = "outbox-crash-child: delivered";
/// Drain processes killed, each while a chunk of the messages is written.
const ROUNDS: i64 = 5;
/// Messages written during each killed process's life.
const CHUNK: i64 = 120;
const SHARDS: i64 = 20;
/// Objects per shard: a chunk's messages are all of different (shard,
/// object) groups, so a process has at least `CHUNK` deliveries to make
/// and reaches any kill point up to it.
const OBJECTS: i64 = 7;
/// The most deliveries a process makes before it is killed.
const KILL_AFTER_AT_MOST: usize = 60;
/// The drain processes' lease.
const LEASE: Duration = Duration::from_secs(2);
/// Leases a process may go without a delivery, rows pending, before the
/// test calls it stalled: a killed process's claims end with their lease,
/// and a starting process (a test binary, its pool, its first claim) takes
/// far less than that.
const STALL_LEASES: u32 = 30;
/// Leases the last process may take to drain what is left.
const FINAL_DRAIN_LEASES: u32 = 60;

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
                // The parent's kill point: the delivery is logged, the
                // round's commit still to come.
                println!("{DELIVERED}");
                // A receiver's own work: the kill finds deliveries in flight.
                tokio::time::sleep(Duration::from_millis(2)).await;
                Ok::<_, HandlerError>(())
            }
        })
        .discard(OutboxCategory::OrganizationAudit);
    let worker = OutboxWorker::builder(db.clone(), receivers)
        .drain_config(DrainConfig::default().lease(LEASE).batch_size(4))
        .poll_interval(Duration::from_millis(20))
        .spawn()
        .await
        .unwrap();
    if std::env::var(CHILD_FINAL).is_ok() {
        // A stall fails the child (and so the parent's check of its exit)
        // instead of hanging the suite. Nothing to await across processes:
        // the count is polled.
        let store = worker.drainer().view();
        let bound = LEASE * FINAL_DRAIN_LEASES;
        let started = Instant::now();
        loop {
            let pending = store.pending_count(OutboxKind::Region).await.unwrap();
            if pending == 0 {
                break;
            }
            let waited = started.elapsed();
            assert!(
                waited < bound,
                "the last drain process left {pending} rows after {waited:.1?} \
                 (bound {bound:?}, {FINAL_DRAIN_LEASES} leases)"
            );
            tokio::time::sleep(Duration::from_millis(50)).await; // poll interval
        }
        worker.shutdown().await;
    } else {
        std::future::pending::<()>().await; // until SIGKILL
    }
}

/// A drain process and its deliveries as it reports them.
struct Child {
    process: std::process::Child,
    delivered: mpsc::UnboundedReceiver<()>,
}

impl Child {
    fn spawn(url: &str, last: bool) -> Self {
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
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if last {
            command.env(CHILD_FINAL, "1");
        }
        let mut process = command.spawn().unwrap();
        let stdout = process.stdout.take().unwrap();
        let (sender, delivered) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line == DELIVERED && sender.send(()).is_err() {
                    break;
                }
            }
        });
        Self { process, delivered }
    }

    /// Waits until the process has made `count` deliveries.
    async fn wait_for_deliveries(&mut self, count: usize, seed: u64) {
        let bound = LEASE * STALL_LEASES;
        for seen in 0..count {
            let started = Instant::now();
            match tokio::time::timeout(bound, self.delivered.recv()).await {
                Ok(Some(())) => {}
                Ok(None) => panic!(
                    "OUTBOX_CRASH_SEED={seed}: the drain process exited after {seen} of its \
                     {count} deliveries: {:?}",
                    self.process.wait()
                ),
                Err(_) => panic!(
                    "OUTBOX_CRASH_SEED={seed}: the drain process made no delivery for \
                     {:.1?} (bound {bound:?}, {STALL_LEASES} leases) after {seen} of its {count}",
                    started.elapsed()
                ),
            }
        }
    }

    /// SIGKILL.
    fn kill(mut self) {
        self.process.kill().unwrap();
        self.process.wait().unwrap();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// Writes messages `numbers`, one transaction each: ids commit in order.
/// Returns (id, shard, object) of each.
async fn write(db: DatabaseConnection, numbers: std::ops::Range<i64>) -> Vec<(i64, i64, i64)> {
    let mut written = Vec::new();
    for n in numbers {
        let (shard, object) = (n % SHARDS, n % OBJECTS);
        let txn = db.begin().await.unwrap();
        let row = write_region(
            &txn,
            OutboxMessage::new(
                OutboxCategory::OrganizationUpdate,
                ShardId(shard),
                ObjectId(object),
            ),
        )
        .await
        .unwrap();
        txn.commit().await.unwrap();
        written.push((row.id, shard, object));
    }
    written
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_drain_processes_lose_nothing_and_keep_order() {
    let seed = outbox_testing::seed("OUTBOX_CRASH_SEED");
    let mut rng = StdRng::seed_from_u64(seed);
    let db = TestDatabase::postgres("crash").await.unwrap();
    db.db
        .execute_unprepared(
            "CREATE TABLE delivery_log (seq bigserial PRIMARY KEY, pid bigint NOT NULL, shard bigint NOT NULL, \
             object bigint NOT NULL, id bigint NOT NULL, first_id bigint NOT NULL)",
        )
        .await
        .unwrap();

    // Each process is killed after a number of its deliveries, while its
    // chunk is being written (or once it is, for a late kill point).
    let mut written = Vec::new();
    let mut kill_points = Vec::new();
    for round in 0..ROUNDS {
        let mut child = Child::spawn(&db.url, false);
        let writer = tokio::spawn(write(db.db.clone(), round * CHUNK..(round + 1) * CHUNK));
        let kill_after = rng.random_range(1..=KILL_AFTER_AT_MOST);
        child.wait_for_deliveries(kill_after, seed).await;
        child.kill(); // SIGKILL
        kill_points.push(kill_after);
        written.extend(writer.await.unwrap());
    }
    let last = Child::spawn(&db.url, true);
    let status = tokio::task::spawn_blocking(move || {
        let mut last = last;
        last.process.wait().unwrap()
    })
    .await
    .unwrap();
    assert!(
        status.success(),
        "OUTBOX_CRASH_SEED={seed}: the final drain process failed (killed after \
         {kill_points:?} deliveries before it)"
    );

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
        pids.len() >= ROUNDS as usize,
        "OUTBOX_CRASH_SEED={seed}: every killed process logged its deliveries: {} processes \
         in the log",
        pids.len()
    );
    // Every message delivered at least once (as itself or coalesced into a newer row).
    for (id, shard, object) in &written {
        assert!(
            log.iter()
                .any(|l| l.1 == *shard && l.2 == *object && l.3 >= *id),
            "OUTBOX_CRASH_SEED={seed}: row {id} (shard {shard}, object {object}) was never \
             delivered (kill points {kill_points:?})"
        );
    }
    // Order per shard within each process: groups in increasing lowest id.
    let mut last_first: HashMap<(i64, i64), i64> = HashMap::new();
    for (pid, shard, _, _, first_id) in &log {
        if let Some(previous) = last_first.insert((*pid, *shard), *first_id) {
            assert!(
                previous < *first_id,
                "OUTBOX_CRASH_SEED={seed}: process {pid} shard {shard}: {previous} then {first_id}"
            );
        }
    }
    assert_eq!(
        db.store().pending_count(OutboxKind::Region).await.unwrap(),
        0
    );
}
