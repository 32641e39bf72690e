//! Scenario (a) of the drain bench, 20,000 one-message shards, beside
//! graphile_worker 0.14 (the Rust port of Graphile Worker) draining 20,000
//! no-op jobs from the same PostgreSQL server, with its LocalQueue (jobs
//! fetched in batches and handed out locally) in two set-ups.
//!
//! ```text
//! cargo bench --manifest-path bench-peers/Cargo.toml --target-dir target
//! ```
//!
//! Uses `DATABASE_URL` when set; otherwise starts a throwaway cluster (fsync
//! on) under the system temp directory and removes it afterwards. Each of 5
//! repeats runs the floor of the drain bench, our drain, then graphile_worker
//! in two set-ups; every figure is the median of its ratios to the floor
//! run at the start of the same repeat. graphile_worker's run ends when its
//! handler has run for every job and its jobs table is empty (completions
//! are written in batches after the handler returns); ours when the drain
//! round that found nothing due returns. It prints a Markdown table, as
//! `docs/benchmarks.md` shows it (each repeat's ratios also go to stderr).

#![allow(missing_docs, clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use graphile_worker::{
    IntoTaskHandlerResult, JobSpec, LocalQueueConfig, RawJobSpec, TaskHandler, WorkerContext,
    WorkerOptions, WorkerUtils,
};
use outbox_core::drain::DEFAULT_CONCURRENCY;
use outbox_core::DrainConfig;
use outbox_testing::database::{start_cluster_at, stop_cluster_at, TestDatabase};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;
use tokio::sync::Notify;

#[path = "../../outbox-seaorm/benches/support/mod.rs"]
mod support;
use support::{drain_all, fill, floor, median, rate};
use outbox_testing::bench as markdown;
use markdown::{ratio, Table};

const MESSAGES: i64 = 20_000;
const REPEATS: usize = 5;
const SCHEMA: &str = "graphile_worker";

/// Jobs whose handler ran in the current run, and a wake-up at the last.
static DONE: AtomicUsize = AtomicUsize::new(0);
static ALL_DONE: LazyLock<Notify> = LazyLock::new(Notify::new);

#[derive(Deserialize, Serialize)]
struct Noop {
    n: i64,
    name: String,
}

impl TaskHandler for Noop {
    const IDENTIFIER: &'static str = "noop";

    async fn run(self, _ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        if DONE.fetch_add(1, Ordering::SeqCst) + 1 == MESSAGES as usize {
            ALL_DONE.notify_one();
        }
        Ok::<(), String>(())
    }
}

/// A graphile_worker set-up.
struct Setup {
    label: &'static str,
    options: fn(WorkerOptions) -> WorkerOptions,
}

// Without a LocalQueue (concurrency 16), graphile_worker 0.14.1 stopped
// fetching after about 6,000 of the 20,000 jobs in our first run and sat idle
// with the rest available: not investigated, so that set-up is left out.
const SETUPS: [Setup; 2] = [
    Setup {
        label: "graphile_worker, LocalQueue of 1,000, concurrency 16",
        options: |options| {
            options
                .concurrency(DEFAULT_CONCURRENCY)
                .complete_job_batch_delay(Duration::from_millis(5))
                .local_queue(LocalQueueConfig::default().with_size(1_000))
        },
    },
    Setup {
        // The set-up of graphile_worker's own perf_test bench.
        label: "graphile_worker, LocalQueue of 5,000, concurrency 500",
        options: |options| {
            options
                .concurrency(500)
                .poll_interval(Duration::from_millis(5))
                .complete_job_batch_delay(Duration::from_millis(5))
                .local_queue(LocalQueueConfig::default().with_size(5_000))
        },
    },
];

/// One run of graphile_worker over `MESSAGES` jobs added beforehand.
async fn graphile(url: &str, setup: &Setup) -> Duration {
    let pool = PgPoolOptions::new()
        .max_connections(20)
        .connect(url)
        .await
        .unwrap();
    let utils = WorkerUtils::new(pool.clone(), SCHEMA);
    utils.migrate().await.unwrap();
    sqlx::query("DELETE FROM graphile_worker._private_jobs")
        .execute(&pool)
        .await
        .unwrap();
    let jobs: Vec<RawJobSpec> = (0..MESSAGES)
        .map(|n| RawJobSpec {
            identifier: Noop::IDENTIFIER.to_owned(),
            payload: serde_json::to_value(Noop {
                n,
                name: "some payload of a realistic size".to_owned(),
            })
            .unwrap(),
            spec: JobSpec::default(),
        })
        .collect();
    for chunk in jobs.chunks(5_000) {
        utils.add_raw_jobs(chunk).await.unwrap();
    }
    sqlx::query("VACUUM ANALYZE graphile_worker._private_jobs")
        .execute(&pool)
        .await
        .unwrap();
    DONE.store(0, Ordering::SeqCst);

    let worker = (setup.options)(
        WorkerOptions::default()
            .pg_pool(pool.clone())
            .schema(SCHEMA)
            .define_job::<Noop>(),
    )
    .init()
    .await
    .unwrap();
    let worker = Arc::new(worker);
    let all_done = ALL_DONE.notified();
    let started = Instant::now();
    let running = tokio::spawn({
        let worker = worker.clone();
        async move { worker.run().await }
    });
    all_done.await;
    // The completions are batched: wait for the last to land.
    loop {
        let (left,): (i64,) = sqlx::query_as("SELECT count(*) FROM graphile_worker._private_jobs")
            .fetch_one(&pool)
            .await
            .unwrap();
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = started.elapsed();
    worker.request_shutdown();
    running.await.unwrap().unwrap();
    pool.close().await;
    elapsed
}

#[tokio::main]
async fn main() {
    let own_cluster = std::env::var("DATABASE_URL").is_err();
    let dir = std::env::temp_dir().join(format!("outbox-bench-peers-{}", std::process::id()));
    let admin = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => start_cluster_at(&dir, true).unwrap(),
    };
    let database = TestDatabase::postgres_on(&admin, "peers").await.unwrap();
    let db = &database.db;

    let mut ours = Vec::new();
    let mut theirs: Vec<Vec<f64>> = vec![Vec::new(); SETUPS.len()];
    let mut ours_over_theirs: Vec<Vec<f64>> = vec![Vec::new(); SETUPS.len()];
    for repeat in 1..=REPEATS {
        let (elapsed, _) = floor(db, MESSAGES).await;
        let floor_rate = rate(MESSAGES, elapsed);
        fill(db, MESSAGES, MESSAGES, None).await;
        let (elapsed, deliveries, _) = drain_all(db, DrainConfig::default(), 1).await;
        assert_eq!(deliveries, MESSAGES as usize);
        let our_rate = rate(MESSAGES, elapsed);
        ours.push(our_rate / floor_rate);
        eprintln!(
            "repeat {repeat}: ours {:.2}x the floor",
            our_rate / floor_rate
        );
        for (n, setup) in SETUPS.iter().enumerate() {
            let their_rate = rate(MESSAGES, graphile(&database.url, setup).await);
            theirs[n].push(their_rate / floor_rate);
            ours_over_theirs[n].push(our_rate / their_rate);
            eprintln!(
                "  {}: {:.2}x the floor",
                setup.label,
                their_rate / floor_rate
            );
        }
    }

    eprintln!(
        "20,000 one-message shards (ours) vs 20,000 no-op jobs (graphile_worker 0.14), \
         PostgreSQL, one process; medians of {REPEATS} repeats"
    );
    let mut table = Table::new(&["20,000 messages", "÷ floor", "ours ÷ it"]);
    table.row([
        "outbox drain, defaults, one drain task".to_owned(),
        ratio(median(&mut ours)),
        String::new(),
    ]);
    for (n, setup) in SETUPS.iter().enumerate() {
        table.row([
            setup.label.to_owned(),
            ratio(median(&mut theirs[n])),
            ratio(median(&mut ours_over_theirs[n])),
        ]);
    }
    print!("{table}");
    db.clone().close().await.unwrap();
    drop(database);
    if own_cluster {
        stop_cluster_at(&dir).unwrap();
    }
}
