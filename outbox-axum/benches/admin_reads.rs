//! What the admin reads cost on a huge backlog, on PostgreSQL: the admin
//! snapshot (`GET /shards`), the dashboard page (`GET /dashboard`),
//! `GET /health` and one round of the worker's backlog gauges
//! (`DrainView::backlog`), each timed with 10,000 pending rows and with
//! 10,000,000 pending rows (same run, same database), as a ratio; then the
//! drain rate over the 10M backlog with the dashboard refreshed every second,
//! as a ratio to the drain rate without it.
//!
//! Run with `cargo bench -p outbox-axum --bench admin_reads`.
//!
//! The rows are written by one `INSERT … SELECT generate_series` per size
//! (two scopes, row `n` in shard `n % 100,000`, so 10,000 one-row shards at
//! the small size and 100,000 shards of 100 rows at the large one), then
//! `ANALYZE` (no `VACUUM`: the visibility map is as a busy queue's). Each
//! read goes through the admin router (`tower::ServiceExt::oneshot`, no
//! socket) or the view, twice to warm up, then `OUTBOX_BENCH_REPEAT` times
//! (default 7); the median is printed, with the number of sequential scans
//! of `region_outbox` the measured reads made (`pg_stat_user_tables`).
//!
//! The two sizes live in two databases of one cluster, and their reads
//! alternate, so that the load of a shared machine falls on both alike.
//!
//! The drain: two `drain_due` loops with a no-op receiver on the 10M
//! backlog, in phases of `OUTBOX_BENCH_DRAIN_SECS` seconds (default 10)
//! without (A) and with (B) a `GET /dashboard` every second (the next one
//! right after a render that took longer), in the order ABBAAB: the drain
//! slows down as the dead tuples it leaves pile up, and that order cancels a
//! steady drift. Autovacuum is off on the outbox tables from the fill on
//! (the reads see the table as filled); each drain phase starts after a
//! `VACUUM` (not timed), so that each starts from the same state. The ratio
//! is the rate with ÷ without.
//!
//! It prints one Markdown table of both, as `docs/benchmarks.md` shows it;
//! the fill and each drain phase go to stderr as they end.
//!
//! `OUTBOX_BENCH_ROWS=n` changes the large size (default 10,000,000).
//! Uses `DATABASE_URL` when set; otherwise starts a throwaway cluster (with
//! PostgreSQL's default durability) in the temp directory and removes it
//! afterwards: the large size takes about 3 GB there while it runs.

#![allow(missing_docs, clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use outbox_axum::admin::Admin;
use outbox_core::{Drainer, HandlerError, OutboxKind, Receivers};
use outbox_seaorm::SeaOrmStore;
use outbox_testing::database::{start_cluster_at, stop_cluster_at, TestDatabase};
use sea_orm::{ConnectionTrait, DatabaseConnection, Statement};
use tokio::time::MissedTickBehavior;
use tower::ServiceExt;

use markdown::{ms, ratio, thousands, Table};
use outbox_testing::bench as markdown;

outbox_core::registry! {
    BenchScope = 0 {
        BenchUpdate = 1,
    }
    OtherScope = 1 {
        OtherUpdate = 2,
    }
}

const SMALL: i64 = 10_000;
const DEFAULT_LARGE: i64 = 10_000_000;
const SHARDS: i64 = 100_000;
const DEFAULT_REPEAT: usize = 7;
const DEFAULT_DRAIN_SECS: u64 = 10;
const DRAIN_LOOPS: usize = 2;

/// The reads, in the order they are printed.
const READS: [&str; 4] = [
    "admin snapshot (GET /shards)",
    "dashboard page (GET /dashboard)",
    "GET /health",
    "one gauge round (backlog)",
];

fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn stmt(sql: &str) -> Statement {
    Statement::from_string(sea_orm::DbBackend::Postgres, sql)
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

/// Empties the outbox and writes `rows` rows, then `ANALYZE`.
async fn fill(db: &DatabaseConnection, rows: i64) -> Duration {
    let started = Instant::now();
    db.execute_unprepared(
        "TRUNCATE region_outbox, control_outbox, outbox_claim_bucket, outbox_shard_state",
    )
    .await
    .unwrap();
    db.execute_unprepared(&format!(
        "INSERT INTO region_outbox (shard_scope, shard_identifier, category, object_identifier, \
         payload, message_id)
         SELECT (n % {SHARDS}) % 2, n % {SHARDS}, 1 + (n % {SHARDS}) % 2, n,
                jsonb_build_object('n', n, 'name', 'some payload of a realistic size'),
                gen_random_uuid()
         FROM generate_series(0, {rows} - 1) n"
    ))
    .await
    .unwrap();
    db.execute_unprepared("ANALYZE region_outbox")
        .await
        .unwrap();
    // The table stays as filled while it is measured: no autovacuum run
    // in the middle (the drain phases vacuum before each).
    db.execute_unprepared("ALTER TABLE region_outbox SET (autovacuum_enabled = off)")
        .await
        .unwrap();
    started.elapsed()
}

/// Sequential scans of `region_outbox` so far.
async fn seq_scans(db: &DatabaseConnection) -> i64 {
    let row = db
        .query_one_raw(stmt(
            "SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'region_outbox'",
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get("", "seq_scan").unwrap()
}

async fn get(router: &Router, uri: &str) -> usize {
    let response = router
        .clone()
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        status,
        StatusCode::OK,
        "{uri}: {}",
        String::from_utf8_lossy(&body)
    );
    body.len()
}

async fn read(which: usize, router: &Router, drainer: &Drainer<OutboxCategory>) {
    match which {
        0 => {
            get(router, "/shards?kind=region&limit=100").await;
        }
        1 => {
            get(router, "/dashboard?kind=region").await;
        }
        2 => {
            get(router, "/health").await;
        }
        _ => {
            drainer.view().backlog(OutboxKind::Region).await.unwrap();
        }
    }
}

/// How long a backend may keep its statistics before the shared counters
/// see them (PostgreSQL 15+: up to 10 s when it went idle within a second
/// of its last flush).
const STATS_FLUSH: Duration = Duration::from_secs(11);

/// One database with its admin router and drainer.
struct Size {
    rows: i64,
    db: TestDatabase,
    router: Router,
    drainer: Drainer<OutboxCategory>,
}

/// Each read's median time and the sequential scans the measured runs made,
/// per size: the sizes' reads alternate (small, large, then large, small),
/// so that the load of a shared machine falls on both alike.
async fn measure(sizes: &[Size], repeat: usize) -> Vec<Vec<(Duration, i64)>> {
    for which in 0..READS.len() {
        for size in sizes {
            for _ in 0..2 {
                read(which, &size.router, &size.drainer).await;
            }
        }
    }
    tokio::time::sleep(STATS_FLUSH).await;
    let mut scans = Vec::new();
    for size in sizes {
        scans.push(seq_scans(&size.db.db).await);
    }
    let mut results = vec![Vec::new(); sizes.len()];
    for which in 0..READS.len() {
        let mut times = vec![Vec::with_capacity(repeat); sizes.len()];
        for round in 0..repeat {
            for at in 0..sizes.len() {
                let at = if round % 2 == 0 {
                    at
                } else {
                    sizes.len() - 1 - at
                };
                let size = &sizes[at];
                let started = Instant::now();
                read(which, &size.router, &size.drainer).await;
                times[at].push(started.elapsed());
            }
        }
        tokio::time::sleep(STATS_FLUSH).await;
        for (at, size) in sizes.iter().enumerate() {
            let now = seq_scans(&size.db.db).await;
            results[at].push((median(std::mem::take(&mut times[at])), now - scans[at]));
            scans[at] = now;
        }
    }
    results
}

/// Rows delivered per second by `DRAIN_LOOPS` drain loops in `secs`,
/// with the dashboard fetched every second meanwhile when `dashboard`.
async fn drain_rate(
    drainer: &Drainer<OutboxCategory>,
    router: &Router,
    secs: u64,
    dashboard: bool,
) -> (f64, usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let delivered = Arc::new(AtomicUsize::new(0));
    let loops: Vec<_> = (0..DRAIN_LOOPS)
        .map(|_| {
            let drainer = drainer.clone();
            let stop = stop.clone();
            let delivered = delivered.clone();
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
                    delivered.fetch_add(report.deliveries, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let pages = dashboard.then(|| {
        let router = router.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut pages = 0;
            let mut every = tokio::time::interval(Duration::from_secs(1));
            every.set_missed_tick_behavior(MissedTickBehavior::Delay);
            while !stop.load(Ordering::Relaxed) {
                every.tick().await;
                get(&router, "/dashboard?kind=region").await;
                pages += 1;
            }
            pages
        })
    });
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let count = delivered.load(Ordering::Relaxed);
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for drain_loop in loops {
        drain_loop.await.unwrap();
    }
    let pages = match pages {
        Some(pages) => pages.await.unwrap(),
        None => 0,
    };
    (count as f64 / elapsed.as_secs_f64(), pages)
}

#[tokio::main]
async fn main() {
    let large = env_number("OUTBOX_BENCH_ROWS", DEFAULT_LARGE);
    let repeat = env_number("OUTBOX_BENCH_REPEAT", DEFAULT_REPEAT).max(1);
    let drain_secs = env_number("OUTBOX_BENCH_DRAIN_SECS", DEFAULT_DRAIN_SECS).max(1);

    let own_cluster = std::env::var("DATABASE_URL").is_err();
    let dir = std::env::temp_dir().join(format!("outbox-bench-admin-{}", std::process::id()));
    let admin = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => start_cluster_at(&dir, true).unwrap(),
    };
    let mut sizes = Vec::new();
    for (rows, label) in [(SMALL, "bench_admin_small"), (large, "bench_admin_large")] {
        let db = TestDatabase::postgres_on(&admin, label).await.unwrap();
        let receivers = Receivers::new()
            .on(OutboxCategory::BenchUpdate, |_message| async {
                Ok::<_, HandlerError>(())
            })
            .on(OutboxCategory::OtherUpdate, |_message| async {
                Ok::<_, HandlerError>(())
            });
        let drainer = Drainer::new(SeaOrmStore::new(db.db.clone()).unwrap(), receivers);
        let router = Admin::new(drainer.clone()).router_behind(tower::layer::util::Identity::new());
        sizes.push(Size {
            rows,
            db,
            router,
            drainer,
        });
    }

    eprintln!(
        "PostgreSQL: admin reads at {SMALL} and {large} pending rows, one database each on one \
         cluster (two scopes, row n in shard n % {SHARDS}; ANALYZE, no VACUUM), median of \
         {repeat}, the sizes' reads alternating, after 2 warm-ups; through the admin router \
         (oneshot) and DrainView::backlog"
    );
    for size in &sizes {
        let took = fill(&size.db.db, size.rows).await;
        eprintln!("  filled {} rows in {:.1} s", size.rows, took.as_secs_f64());
    }
    let results = measure(&sizes, repeat).await;
    let (small_rows, large_rows) = (thousands(SMALL as f64), thousands(large as f64));
    let (small_header, large_header, scans_header) = (
        format!("{small_rows} rows"),
        format!("{large_rows} rows"),
        format!("sequential scans of the outbox ({small_rows} / {large_rows} rows)"),
    );
    let mut table = Table::new(&["read", &small_header, &large_header, "ratio", &scans_header]);
    for (which, name) in READS.iter().enumerate() {
        let (small, small_scans) = results[0][which];
        let (big, big_scans) = results[1][which];
        let row = [
            (*name).to_owned(),
            ms(small),
            ms(big),
            ratio(big.as_secs_f64() / small.as_secs_f64()),
            format!("{small_scans} / {big_scans}"),
        ];
        eprintln!("  {}", row.join("  "));
        table.row(row);
    }

    let Size {
        db,
        router,
        drainer,
        ..
    } = sizes.pop().unwrap();
    drop(sizes);
    eprintln!(
        "drain over the {large}-row backlog, {DRAIN_LOOPS} drain_due loops, no-op receiver, \
         phases of {drain_secs} s without (A) and with (B) the dashboard every second, in the \
         order ABBAAB, each after a VACUUM:"
    );
    let mut without = Vec::new();
    let mut with = Vec::new();
    for dashboard in [false, true, true, false, false, true] {
        db.db
            .execute_unprepared("VACUUM region_outbox")
            .await
            .unwrap();
        let (rate, pages) = drain_rate(&drainer, &router, drain_secs, dashboard).await;
        if dashboard {
            eprintln!("  B  dashboard every 1 s: {rate:>9.0} rows/s ({pages} pages rendered)");
            with.push(rate);
        } else {
            eprintln!("  A  without:             {rate:>9.0} rows/s");
            without.push(rate);
        }
    }
    // The sums of the phases.
    table.row([
        "drain rate, dashboard every 1 s ÷ without".to_owned(),
        String::new(),
        String::new(),
        format!(
            "{:.3}×",
            with.iter().sum::<f64>() / without.iter().sum::<f64>()
        ),
        String::new(),
    ]);
    print!("{table}");

    drop(router);
    drop(drainer);
    db.db.clone().close().await.unwrap();
    drop(db);
    if own_cluster {
        stop_cluster_at(&dir).unwrap();
        std::fs::remove_dir_all(&dir).ok();
    }
}
