//! The drain under vacuum pressure, on PostgreSQL (issue 27 item 1): writers
//! commit a model row and an outbox row (`write_region`, with `NOTIFY`) at a
//! fixed offered rate while an `OutboxWorker` (default configuration) drains,
//! three ways:
//!
//! 1. autovacuum alone;
//! 2. a `REPEATABLE READ` transaction opened (and its snapshot taken) before
//!    the run and held to its end: the xmin horizon is pinned, vacuum can
//!    remove nothing the drain deletes meanwhile;
//! 3. the same pin, released half-way.
//!
//! and, as the baseline, the floor (a bare `DELETE … WHERE id IN (SELECT …
//! ORDER BY id LIMIT 500 FOR UPDATE SKIP LOCKED) RETURNING id` loop, polling
//! every 5 ms when it finds nothing) on a plain table of the same columns
//! (`plain_outbox`, one model row and one outbox row per write, no
//! `NOTIFY`) at the same offered rate, without and with the pin.
//!
//! The outbox tables are migrated to the partition ring
//! (`outbox_migrations::OutboxRingMigrator`, opted into), and the worker
//! empties drained partitions with `TRUNCATE` (`outbox_seaorm::ring`);
//! sizes and dead tuples are summed over the partitions.
//! `OUTBOX_BENCH_RING=0` leaves the default plain tables. The `rotating` runs are the
//! prototype that led there: the floor's loop on a partitioned table of its
//! own, emptied by the bench's own rotator.
//!
//! Run with `cargo bench -p outbox-axum --bench vacuum_pressure`.
//!
//! Every `OUTBOX_BENCH_REPORT_SECS` (default 10) it prints on stderr: rows
//! delivered per second, commit → receiver p50 / p99 (from the instant just
//! before each commit), writes committed per second, the outbox table's dead
//! tuples (`pg_stat_user_tables`, which lags by up to a few seconds), the
//! sizes of the outbox table, its indexes and the claim-bucket table. At the
//! end, a Markdown table with a row per run, as `docs/benchmarks.md` shows
//! it: the delivery rate over the run (pinned: with its ratio to the same
//! drain unpinned), p99 over the run, the table + indexes size at the end ÷
//! at the first report, and the claim-bucket table's size at the end; and on
//! stderr, for the half-way release, how long after it the dead tuples fell
//! back under twice their unpinned level (or that they did not within the
//! run).
//!
//! - `OUTBOX_BENCH_SECS`: each run's length (default 300: the five
//!   minutes); `OUTBOX_BENCH_SECS=60` for a short run (about 6 minutes in all).
//! - `OUTBOX_BENCH_RATE`: offered writes per second (default 2,000), over
//!   1,000 shards, from 8 connections.
//! - `OUTBOX_BENCH_RUNS`: which runs, comma-separated, of `unpinned`,
//!   `pinned`, `half`, `floor`, `floor-pinned`, and the partitioned
//!   prototype's `rotating`, `rotating-pinned`, `rotating-half`
//!   (`vacuum_pressure/rotating.rs`; default: all eight).
//! - `OUTBOX_BENCH_STATEMENTS=1`: after each run, the statements that took
//!   the most time (`pg_stat_statements`: calls, mean and total time, buffers
//!   touched per call), to see which one the pin slows down.
//!
//! Uses `DATABASE_URL` when set; otherwise starts a throwaway cluster with
//! PostgreSQL's default durability (fsync on) and removes it afterwards.

#![allow(missing_docs, clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_axum::OutboxWorker;
use outbox_core::{HandlerError, Message, OutboxKind, Receivers};
use outbox_seaorm::{listener, write_region, ObjectId, OutboxMessage, ShardId};
use outbox_testing::database::{start_cluster_at, stop_cluster_at, TestDatabase};
use sea_orm::{ConnectionTrait, DatabaseConnection, Statement, TransactionTrait};
use tokio::sync::Semaphore;
use tokio::time::MissedTickBehavior;

use markdown::{thousands, Table};
use outbox_testing::bench as markdown;

outbox_core::registry! {
    BenchScope = 0 {
        BenchUpdate = 1,
    }
}

const SHARDS: i64 = 1_000;
const WRITERS: u32 = 8;
const TICK: Duration = Duration::from_millis(10);
const FLOOR_POLL: Duration = Duration::from_millis(5);

fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn stmt(sql: &str) -> Statement {
    Statement::from_string(sea_orm::DbBackend::Postgres, sql)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

#[path = "vacuum_pressure/rotating.rs"]
mod rotating;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Drain {
    Outbox,
    Floor,
    /// The floor's loop on the partitioned prototype (`rotating.rs`).
    Rotating,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Pin {
    None,
    Whole,
    Half,
}

impl Pin {
    fn name(self) -> &'static str {
        match self {
            Pin::None => "autovacuum alone",
            Pin::Whole => "xmin pinned the whole run",
            Pin::Half => "xmin pinned, released half-way",
        }
    }
}

/// What the receivers and writers record.
#[derive(Default)]
struct Log {
    /// The instant just before each row's commit, by row id.
    commits: Mutex<HashMap<i64, Instant>>,
    /// Latencies of deliveries since the last report.
    latencies: Mutex<Vec<Duration>>,
    delivered: AtomicU64,
    written: AtomicU64,
}

impl Log {
    fn received(&self, id: i64, at: Instant) {
        if let Some(committed) = self.commits.lock().unwrap().remove(&id) {
            self.latencies
                .lock()
                .unwrap()
                .push(at.saturating_duration_since(committed));
        }
        self.delivered.fetch_add(1, Ordering::Relaxed);
    }
}

/// Sizes and dead tuples.
struct Sample {
    dead: i64,
    table: i64,
    indexes: i64,
    buckets: i64,
}

async fn sample(db: &DatabaseConnection, drain: Drain) -> Sample {
    match drain {
        Drain::Rotating => return rotating::sample(db, "rotating_outbox").await,
        Drain::Outbox => return rotating::sample(db, "region_outbox").await,
        Drain::Floor => {}
    }
    let row = db
        .query_one_raw(stmt(
            "SELECT (SELECT n_dead_tup FROM pg_stat_user_tables
                     WHERE relid = 'plain_outbox'::regclass) AS dead,
                    pg_relation_size('plain_outbox') AS table_bytes,
                    pg_indexes_size('plain_outbox') AS index_bytes,
                    pg_total_relation_size('outbox_claim_bucket') AS bucket_bytes",
        ))
        .await
        .unwrap()
        .unwrap();
    Sample {
        dead: row.try_get("", "dead").unwrap(),
        table: row.try_get("", "table_bytes").unwrap(),
        indexes: row.try_get("", "index_bytes").unwrap(),
        buckets: row.try_get("", "bucket_bytes").unwrap(),
    }
}

fn mb(bytes: i64) -> f64 {
    bytes as f64 / 1_048_576.0
}

/// One write: a model row and an outbox row, with `NOTIFY`.
async fn write(writer: &DatabaseConnection, n: i64, log: &Log) {
    let txn = writer.begin().await.unwrap();
    txn.execute_raw(Statement::from_sql_and_values(
        txn.get_database_backend(),
        "INSERT INTO widgets (organization_id, name) VALUES ($1, $2)",
        [(n % SHARDS).into(), format!("w{n}").into()],
    ))
    .await
    .unwrap();
    let row = write_region(
        &txn,
        OutboxMessage::new(
            OutboxCategory::BenchUpdate,
            ShardId(n % SHARDS),
            ObjectId(n),
        ),
    )
    .await
    .unwrap();
    listener::notify(&txn, OutboxKind::Region).await.unwrap();
    log.commits.lock().unwrap().insert(row.id, Instant::now());
    txn.commit().await.unwrap();
    log.written.fetch_add(1, Ordering::Relaxed);
}

/// The floor's loop until `stop`.
async fn floor(db: DatabaseConnection, table: &str, log: Arc<Log>, stop: Arc<AtomicBool>) {
    let sql = format!(
        "DELETE FROM {table} WHERE id IN (SELECT id FROM {table} ORDER BY id LIMIT 500 FOR \
         UPDATE SKIP LOCKED) RETURNING id"
    );
    while !stop.load(Ordering::Relaxed) {
        let rows = db.query_all_raw(stmt(&sql)).await.unwrap();
        let at = Instant::now();
        for row in &rows {
            log.received(row.try_get("", "id").unwrap(), at);
        }
        if rows.is_empty() {
            tokio::time::sleep(FLOOR_POLL).await;
        }
    }
}

/// What one run measured.
struct Run {
    rate: f64,
    p99: Duration,
    growth: f64,
    /// The claim-bucket table's size at the end.
    buckets: i64,
    /// When the pin was released (`Pin::Half`), in seconds from the start.
    released_at: Option<u64>,
    /// Dead tuples at each report.
    dead: Vec<i64>,
}

/// The statements that took the most time since the last reset.
async fn top_statements(db: &DatabaseConnection) {
    let rows = db
        .query_all_raw(stmt(
            "SELECT calls, mean_exec_time, total_exec_time,
                    (shared_blks_hit + shared_blks_read + local_blks_hit + local_blks_read)::float8
                        / GREATEST(calls, 1) AS blocks,
                    rows::float8 / GREATEST(calls, 1) AS rows_per_call,
                    left(regexp_replace(query, '\\s+', ' ', 'g'), 110) AS query
             FROM pg_stat_statements
             WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
             ORDER BY total_exec_time DESC LIMIT 10",
        ))
        .await
        .unwrap();
    eprintln!(
        "    {:>8} {:>9} {:>10} {:>9} {:>7}  statement",
        "calls", "mean ms", "total s", "blocks", "rows"
    );
    for row in rows {
        let calls: i64 = row.try_get("", "calls").unwrap();
        let mean: f64 = row.try_get("", "mean_exec_time").unwrap();
        let total: f64 = row.try_get("", "total_exec_time").unwrap();
        let blocks: f64 = row.try_get("", "blocks").unwrap();
        let rows_per_call: f64 = row.try_get("", "rows_per_call").unwrap();
        let query: String = row.try_get("", "query").unwrap();
        eprintln!(
            "    {calls:>8} {mean:>9.3} {:>10.2} {blocks:>9.0} {rows_per_call:>7.1}  {query}",
            total / 1e3
        );
    }
}

async fn run(db: &TestDatabase, drain: Drain, pin: Pin, secs: u64, rate: u64, every: u64) -> Run {
    db.db
        .execute_unprepared(
            "TRUNCATE region_outbox, rotating_outbox, plain_outbox, outbox_claim_bucket, \
             outbox_shard_state, widgets",
        )
        .await
        .unwrap();
    db.db
        .execute_unprepared("VACUUM ANALYZE region_outbox, rotating_outbox, plain_outbox")
        .await
        .unwrap();
    let statements = env_number("OUTBOX_BENCH_STATEMENTS", 0_u8) == 1;
    if statements {
        db.db
            .execute_unprepared("SELECT pg_stat_statements_reset()")
            .await
            .unwrap();
    }
    let log = Arc::new(Log::default());

    let pinned = match pin {
        Pin::None => None,
        Pin::Whole | Pin::Half => {
            let conn = db.connect_again(1).await.unwrap();
            conn.execute_unprepared("BEGIN ISOLATION LEVEL REPEATABLE READ")
                .await
                .unwrap();
            conn.execute_unprepared("SELECT count(*) FROM widgets")
                .await
                .unwrap();
            Some(conn)
        }
    };

    let stop = Arc::new(AtomicBool::new(false));
    let mut worker = None;
    let mut floor_task = None;
    let mut rotator = None;
    let rotations = Arc::new(rotating::Rotations::default());
    match drain {
        Drain::Outbox => {
            let receivers = Receivers::new().on(OutboxCategory::BenchUpdate, {
                let log = log.clone();
                move |message: Message<OutboxCategory>| {
                    log.received(message.id, Instant::now());
                    async { Ok::<_, HandlerError>(()) }
                }
            });
            let handle = OutboxWorker::builder(db.db.clone(), receivers)
                .kinds([OutboxKind::Region])
                .spawn()
                .await
                .unwrap();
            handle.ready().await;
            worker = Some(handle);
        }
        Drain::Floor | Drain::Rotating => {
            let table = match drain {
                Drain::Rotating => "rotating_outbox",
                _ => "plain_outbox",
            };
            let (conn, log, floor_stop) = (
                db.connect_again(2).await.unwrap(),
                log.clone(),
                stop.clone(),
            );
            floor_task = Some(tokio::spawn(async move {
                floor(conn, table, log, floor_stop).await;
            }));
            if drain == Drain::Rotating {
                rotator = Some(tokio::spawn(rotating::rotator(
                    db.connect_again(1).await.unwrap(),
                    rotations.clone(),
                    stop.clone(),
                )));
            }
        }
    }

    let writer = db.connect_again(WRITERS).await.unwrap();
    let writers = {
        let (log, stop, writer) = (log.clone(), stop.clone(), writer.clone());
        tokio::spawn(async move {
            let slots = Arc::new(Semaphore::new(WRITERS as usize));
            let mut tick = tokio::time::interval(TICK);
            tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
            let started = Instant::now();
            let mut offered = 0_u64;
            let mut n = 0_i64;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
                while offered < due {
                    offered += 1;
                    n += 1;
                    let permit = slots.clone().acquire_owned().await.unwrap();
                    let (writer, log) = (writer.clone(), log.clone());
                    tokio::spawn(async move {
                        match drain {
                            Drain::Rotating => {
                                rotating::write(&writer, "rotating_outbox", n, SHARDS, &log).await
                            }
                            Drain::Floor => {
                                rotating::write(&writer, "plain_outbox", n, SHARDS, &log).await
                            }
                            Drain::Outbox => write(&writer, n, &log).await,
                        }
                        drop(permit);
                    });
                }
            }
            // The last writes finish.
            let _all = slots.acquire_many(WRITERS).await.unwrap();
        })
    };

    eprintln!("  {} — {}:", drain_name(drain), pin.name());
    eprintln!(
        "    {:>5} {:>10} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "s",
        "deliv./s",
        "p50 ms",
        "p99 ms",
        "writes/s",
        "dead tup.",
        "table MB",
        "index MB",
        "bucket MB"
    );
    let started = Instant::now();
    let mut all_latencies = Vec::new();
    let mut dead = Vec::new();
    let mut first_size = None;
    let mut last = (0_u64, 0_u64);
    let mut released = None;
    let reports = secs.div_ceil(every);
    for report in 1..=reports {
        tokio::time::sleep_until((started + Duration::from_secs(report * every)).into()).await;
        if pin == Pin::Half
            && released.is_none()
            && started.elapsed() >= Duration::from_secs(secs / 2)
        {
            if let Some(conn) = &pinned {
                conn.execute_unprepared("COMMIT").await.unwrap();
            }
            released = Some(report * every);
            eprintln!("    -- pin released --");
        }
        let delivered = log.delivered.load(Ordering::Relaxed);
        let written = log.written.load(Ordering::Relaxed);
        let mut latencies = std::mem::take(&mut *log.latencies.lock().unwrap());
        latencies.sort();
        let s = sample(&db.db, drain).await;
        first_size.get_or_insert(s.table + s.indexes);
        eprintln!(
            "    {:>5} {:>10.0} {:>9.2} {:>9.2} {:>10.0} {:>10} {:>10.1} {:>10.1} {:>10.2}",
            report * every,
            (delivered - last.0) as f64 / every as f64,
            ms(percentile(&latencies, 0.50)),
            ms(percentile(&latencies, 0.99)),
            (written - last.1) as f64 / every as f64,
            s.dead,
            mb(s.table),
            mb(s.indexes),
            mb(s.buckets),
        );
        dead.push(s.dead);
        all_latencies.extend(latencies);
        last = (delivered, written);
    }
    let elapsed = started.elapsed();
    let end = sample(&db.db, drain).await;
    if statements {
        top_statements(&db.db).await;
    }
    stop.store(true, Ordering::Relaxed);
    writers.await.unwrap();
    if let Some(worker) = worker {
        worker.shutdown().await;
    }
    if let Some(task) = floor_task {
        task.await.unwrap();
    }
    if let Some(task) = rotator {
        task.await.unwrap();
        eprintln!(
            "    partitions truncated: {}, lock attempts timed out: {}",
            rotations.truncated.load(Ordering::Relaxed),
            rotations.lock_timeouts.load(Ordering::Relaxed)
        );
    }
    if let Some(conn) = pinned {
        if released.is_none() {
            conn.execute_unprepared("COMMIT").await.unwrap();
        }
        conn.close().await.unwrap();
    }
    writer.close().await.unwrap();
    all_latencies.sort();
    let run = Run {
        rate: last.0 as f64 / elapsed.as_secs_f64(),
        p99: percentile(&all_latencies, 0.99),
        growth: (end.table + end.indexes) as f64 / first_size.unwrap_or(1).max(1) as f64,
        buckets: end.buckets,
        released_at: released,
        dead,
    };
    eprintln!(
        "    over the run: {:.0} delivered/s, p99 {:.2} ms; table + indexes at the end ÷ at \
         the first report: {:.2}x",
        run.rate,
        ms(run.p99),
        run.growth
    );
    run
}

fn drain_name(drain: Drain) -> &'static str {
    match drain {
        Drain::Outbox => "OutboxWorker",
        Drain::Floor => "floor (DELETE … SKIP LOCKED loop)",
        Drain::Rotating => "floor on the partitioned prototype (TRUNCATE of drained partitions)",
    }
}

#[tokio::main]
async fn main() {
    let secs = env_number("OUTBOX_BENCH_SECS", 300_u64).max(2);
    let rate = env_number("OUTBOX_BENCH_RATE", 2_000_u64).max(1);
    let every = env_number("OUTBOX_BENCH_REPORT_SECS", 10_u64).max(1);

    let own_cluster = std::env::var("DATABASE_URL").is_err();
    let dir = std::env::temp_dir().join(format!("outbox-bench-vacuum-{}", std::process::id()));
    let admin = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => start_cluster_at(&dir, true).unwrap(),
    };
    let db = TestDatabase::postgres_on(&admin, "bench_vacuum_pressure")
        .await
        .unwrap();
    db.db
        .execute_unprepared(
            "CREATE TABLE widgets (id bigserial PRIMARY KEY, organization_id bigint NOT NULL, \
             name text NOT NULL)",
        )
        .await
        .unwrap();
    rotating::create(&db.db).await;
    // The library's storage for databases whose horizon may be held back.
    // `OUTBOX_BENCH_RING=0` measures the default plain tables instead.
    if env_number("OUTBOX_BENCH_RING", 1_u8) == 1 {
        <outbox_migrations::OutboxRingMigrator as sea_orm_migration::MigratorTrait>::up(
            &db.db, None,
        )
        .await
        .unwrap();
    }
    eprintln!(
        "PostgreSQL: {rate} writes/s offered (a model row and an outbox row each, write_region \
         + NOTIFY, {WRITERS} connections, {SHARDS} shards), {secs} s per run, a report every \
         {every} s"
    );

    if env_number("OUTBOX_BENCH_STATEMENTS", 0_u8) == 1 {
        db.db
            .execute_unprepared("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .await
            .unwrap();
    }
    let runs = std::env::var("OUTBOX_BENCH_RUNS").unwrap_or_else(|_| {
        "unpinned,pinned,half,floor,floor-pinned,rotating,rotating-pinned,rotating-half".to_owned()
    });
    let wanted = |name: &str| runs.split(',').any(|run| run.trim() == name);
    let mut results: HashMap<(Drain, Pin), Run> = HashMap::new();
    let mut table = Table::new(&[
        "run",
        "delivered/s",
        "p99",
        "table + indexes, end ÷ first report",
        "claim-bucket table at the end",
    ]);
    for (name, drain, pin) in [
        ("unpinned", Drain::Outbox, Pin::None),
        ("pinned", Drain::Outbox, Pin::Whole),
        ("half", Drain::Outbox, Pin::Half),
        ("floor", Drain::Floor, Pin::None),
        ("floor-pinned", Drain::Floor, Pin::Whole),
        ("rotating", Drain::Rotating, Pin::None),
        ("rotating-pinned", Drain::Rotating, Pin::Whole),
        ("rotating-half", Drain::Rotating, Pin::Half),
    ] {
        if !wanted(name) {
            continue;
        }
        let run = run(&db, drain, pin, secs, rate, every).await;
        let mut delivered = thousands(run.rate);
        if pin == Pin::Whole {
            if let Some(unpinned) = results.get(&(drain, Pin::None)) {
                delivered = format!("{delivered} ({:.3}×)", run.rate / unpinned.rate);
            }
        }
        let pin_name = match (pin, run.released_at) {
            (Pin::None, _) => "autovacuum alone".to_owned(),
            (Pin::Whole, _) | (Pin::Half, None) => "xmin pinned".to_owned(),
            (Pin::Half, Some(at)) => format!("pinned, released at {at} s"),
        };
        let drain_label = match drain {
            Drain::Outbox => "OutboxWorker",
            Drain::Floor => "floor",
            Drain::Rotating => "partitioned floor",
        };
        table.row([
            format!("{drain_label}, {pin_name}"),
            delivered,
            format!("{:.2} ms", ms(run.p99)),
            format!("{:.2}×", run.growth),
            match drain {
                Drain::Outbox => format!("{:.1} MB", mb(run.buckets)),
                Drain::Floor | Drain::Rotating => "—".to_owned(),
            },
        ]);
        results.insert((drain, pin), run);
    }
    print!("{table}");

    if let (Some(unpinned), Some(half)) = (
        results.get(&(Drain::Outbox, Pin::None)),
        results.get(&(Drain::Outbox, Pin::Half)),
    ) {
        let steady = unpinned.dead.iter().copied().max().unwrap_or(0).max(1);
        let release = half.dead.len() / 2;
        match half.dead[release..]
            .iter()
            .position(|&dead| dead <= 2 * steady)
        {
            Some(at) => eprintln!(
                "released half-way: dead tuples back under 2x the unpinned peak ({steady}) \
                 {} s after the release",
                (at as u64 + 1) * every
            ),
            None => eprintln!(
                "released half-way: dead tuples not back under 2x the unpinned peak ({steady}) \
                 within the run"
            ),
        }
    }

    finish(db, own_cluster, &dir).await;
}

async fn finish(db: TestDatabase, own_cluster: bool, dir: &std::path::Path) {
    db.db.clone().close().await.unwrap();
    drop(db);
    if own_cluster {
        stop_cluster_at(dir).unwrap();
        std::fs::remove_dir_all(dir).ok();
    }
}
