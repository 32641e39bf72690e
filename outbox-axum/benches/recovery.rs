//! How long the shards of a worker killed with SIGKILL wait before another
//! process delivers them, on PostgreSQL.
//!
//! Run with `cargo bench -p outbox-axum --bench recovery`.
//!
//! Each run writes 400 one-message shards, starts a worker in a child process
//! whose receiver hangs (so that it holds its claims, renewing them), kills
//! the child with SIGKILL once it is delivering, then starts a worker here
//! (another process, default settings: 3 s lease, 1 s poll) and measures the
//! time from the kill until every row is delivered. Uses `DATABASE_URL` when
//! set; otherwise a throwaway cluster with default durability. It prints a
//! Markdown table of the median and the max over the runs, as
//! `docs/benchmarks.md` shows it (each run's time also goes to stderr).

#![allow(missing_docs, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_axum::OutboxWorker;
use outbox_core::{DrainConfig, HandlerError, Message, OutboxKind, Receivers};
use outbox_testing::database::{connect, start_cluster_at, stop_cluster_at, TestDatabase};
use sea_orm::ConnectionTrait;

use markdown::Table;
use outbox_testing::bench as markdown;

outbox_core::registry! {
    BenchScope = 0 {
        BenchUpdate = 1,
    }
}

const CHILD: &str = "OUTBOX_BENCH_RECOVERY_CHILD";
const SHARDS: i64 = 400;
const RUNS: usize = 3;

/// The worker that gets killed: it prints `delivering` at its first
/// delivery, then hangs in every receiver, holding its claims.
async fn child(url: String) {
    let db = connect(&url, 4).await.unwrap();
    let said = Arc::new(AtomicBool::new(false));
    let receivers = Receivers::new().on(OutboxCategory::BenchUpdate, {
        move |_message: Message<OutboxCategory>| {
            let said = said.clone();
            async move {
                if !said.swap(true, Ordering::SeqCst) {
                    println!("delivering");
                }
                std::future::pending::<()>().await;
                Ok::<_, HandlerError>(())
            }
        }
    });
    let _worker = OutboxWorker::builder(db, receivers)
        .kinds([OutboxKind::Region])
        .drain_config(DrainConfig::default().delivery_timeout(Duration::from_secs(3600)))
        .spawn()
        .await
        .unwrap();
    std::future::pending::<()>().await;
}

async fn pending(db: &sea_orm::DatabaseConnection) -> i64 {
    db.query_one_raw(sea_orm::Statement::from_string(
        sea_orm::DbBackend::Postgres,
        "SELECT count(*) AS n FROM region_outbox",
    ))
    .await
    .unwrap()
    .unwrap()
    .try_get("", "n")
    .unwrap()
}

/// One kill and recovery; returns the time from the kill to the last delivery.
async fn run(database: &TestDatabase) -> Duration {
    let db = &database.db;
    db.execute_unprepared(
        "TRUNCATE region_outbox, outbox_claim_bucket, outbox_shard_state; \
         INSERT INTO region_outbox (shard_scope, shard_identifier, category, object_identifier) \
         SELECT 0, n, 1, n FROM generate_series(1, 400) n",
    )
    .await
    .unwrap();
    assert_eq!(pending(db).await, SHARDS);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(CHILD, &database.url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stdout).lines();
        while let Some(Ok(line)) = lines.next() {
            if line == "delivering" {
                return;
            }
        }
        panic!("the child worker ended before delivering");
    })
    .await
    .unwrap();
    child.kill().unwrap(); // SIGKILL
    let killed = Instant::now();
    child.wait().unwrap();

    let receivers = Receivers::new().discard(OutboxCategory::BenchUpdate);
    let worker = OutboxWorker::builder(db.clone(), receivers)
        .kinds([OutboxKind::Region])
        .spawn()
        .await
        .unwrap();
    while pending(db).await > 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let elapsed = killed.elapsed();
    worker.shutdown().await;
    elapsed
}

#[tokio::main]
async fn main() {
    if let Ok(url) = std::env::var(CHILD) {
        child(url).await;
        return;
    }
    let own_cluster = std::env::var("DATABASE_URL").is_err();
    let dir = std::env::temp_dir().join(format!("outbox-bench-recovery-{}", std::process::id()));
    let admin = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => start_cluster_at(&dir, true).unwrap(),
    };
    let database = TestDatabase::postgres_on(&admin, "recovery").await.unwrap();
    let mut times = Vec::new();
    for n in 1..=RUNS {
        let time = run(&database).await;
        eprintln!(
            "  run {n}: {:.2} s from the kill to the last delivery",
            time.as_secs_f64()
        );
        times.push(time);
    }
    times.sort();
    let lease = DrainConfig::default().lease_duration();
    let mut table = Table::new(&[
        "kill → every row delivered by another process",
        "median",
        "max",
    ]);
    table.row([
        format!(
            "{SHARDS} one-message shards, {RUNS} runs, lease {:.0} s, poll {:.0} s",
            lease.as_secs_f64(),
            outbox_axum::worker::DEFAULT_POLL_INTERVAL.as_secs_f64(),
        ),
        format!("{:.2} s", times[RUNS / 2].as_secs_f64()),
        format!("{:.2} s", times[RUNS - 1].as_secs_f64()),
    ]);
    print!("{table}");
    database.db.clone().close().await.unwrap();
    drop(database);
    if own_cluster {
        stop_cluster_at(&dir).unwrap();
    }
}
