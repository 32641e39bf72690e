//! The write path next to pgbench running the same SQL:
//! requests per second of a small write (a model row, with or without its
//! outbox row, in one transaction) at 8 concurrent clients, on one
//! PostgreSQL server, from pgbench, from Rust without Axum, and through
//! `OutboxLayer`.
//!
//! Run with `cargo bench -p outbox-axum --bench write_path`.
//!
//! The variants, each for 10 s with 8 clients:
//!
//! - (1) pgbench (`-n -c 8 -j 2 -T 10 -M prepared`): `BEGIN; INSERT INTO
//!   widgets …; COMMIT;`
//! - (2) pgbench: the same with the outbox row inserted in between, with the
//!   statement `outbox_seaorm::write_region` sends (`RETURNING id`; the
//!   message id from `gen_random_uuid()`, the timestamps from `now()`, due
//!   since 2016-08-01, no payload, no trace context);
//! - (3) a hand-written transaction through SeaORM (the driver the library
//!   uses), 8 Tokio tasks, no Axum: the model row alone; (3b) with the outbox
//!   row by `write_region`; (3c) with the outbox row by pgbench's statement;
//! - (3d) and (3e): (3) and (3c) through sqlx directly (`sea_orm::sqlx`, on
//!   the same pool); (3f) = (3d) on a pool of its own that does not ping a
//!   connection each time it hands one out (sqlx's `test_before_acquire`,
//!   on by default, and so in SeaORM's pools and the library's test pools);
//! - (4) the Axum route of `latency.rs` (model row + `write_region` through
//!   the request's `Tx`) behind `OutboxLayer` with `flush = false`
//!   (`outbox_axum::defer_flush`) and no background worker: rows stay in the
//!   outbox;
//! - (5) the same with the layer and a background `OutboxWorker` of this
//!   process delivering them (no-op receiver) while the requests run.
//!
//! The Rust variants share one pool of 10 connections (the test database's),
//! as the worker of (5) does. Each variant starts on emptied tables (`widgets`
//! and the outbox tables truncated) right after a `CHECKPOINT`; the variants
//! are interleaved over 3 rounds, the order rotated each round, and every
//! figure is a median over the rounds (ratios: the median of each round's
//! ratio). After each variant, the rows are counted: as many outbox rows as
//! model rows (none for the plain variants; for (5), all delivered once the
//! worker has caught up). It prints two Markdown tables, as
//! `docs/benchmarks.md` shows them: req/s for each, as ratios to (1) and to
//! (3), and the ratios that tell the costs apart: the outbox row (2 ÷ 1,
//! 3b ÷ 3), the driver (3 ÷ 1, 3c ÷ 2), SeaORM over sqlx, `write_region` over
//! its bare statement, the layer (4 ÷ 3b) and the drain alongside (5 ÷ 4),
//! with the rows (5) had left to deliver when its clients stopped. Each
//! variant's rate goes to stderr as it is measured, and what the row counts
//! found wrong (the bench then exits with status 1).
//!
//! - `OUTBOX_BENCH_SECONDS`: seconds per variant (default 10).
//! - `OUTBOX_BENCH_PGBENCH`: the pgbench binary (default Debian's
//!   `/usr/lib/postgresql/15/bin/pgbench`, else `pgbench` on `PATH`).
//!
//! Uses `DATABASE_URL` when set (pgbench gets the test database's URL);
//! otherwise starts a throwaway cluster with PostgreSQL's default durability
//! (fsync on) and removes it afterwards.

#![allow(missing_docs, clippy::unwrap_used)]

use std::future::Future;
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Path;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use axum::Router;
use outbox_axum::{OutboxLayer, OutboxWorker, Tx};
use outbox_core::{HandlerError, Message, OutboxKind, Receivers};
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId};
use outbox_testing::database::{start_cluster_at, stop_cluster_at, TestDatabase};
use sea_orm::sqlx;
use sea_orm::{ConnectionTrait, DatabaseConnection, Statement, TransactionTrait, Value};
use tower::ServiceExt;

use markdown::{ratio, thousands, Table};
use outbox_testing::bench as markdown;

outbox_core::registry! {
    BenchScope = 0 {
        BenchUpdate = 1,
    }
}

const CLIENTS: usize = 8;
/// Organizations (shards) the writes go to.
const ORGANIZATIONS: i64 = 1_000;
const ROUNDS: usize = 3;
const DEFAULT_PGBENCH: &str = "/usr/lib/postgresql/15/bin/pgbench";

const MODEL_INSERT: &str = "INSERT INTO widgets (organization_id, name) VALUES ($1, $2)";
/// The row `write_region` inserts (see `insert_statement` in
/// outbox-seaorm/src/write.rs), with the values it binds computed by the
/// server: `$1` the organization, `$2` the object.
const OUTBOX_INSERT: &str = "INSERT INTO region_outbox (shard_scope, shard_identifier, category, \
     object_identifier, payload, scheduled_from, scheduled_for, date_added, traceparent, \
     message_id) VALUES (0, $1, 1, $2, NULL, now(), '2016-08-01 00:00:00+00', now(), NULL, \
     gen_random_uuid()) RETURNING id";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    PgbenchPlain,
    PgbenchOutbox,
    SeaOrmPlain,
    SeaOrmWriteRegion,
    SeaOrmOutboxSql,
    SqlxPlain,
    SqlxOutboxSql,
    SqlxPlainNoPing,
    LayerNoWorker,
    LayerWorker,
}

use Variant::*;

const VARIANTS: [Variant; 10] = [
    PgbenchPlain,
    PgbenchOutbox,
    SeaOrmPlain,
    SeaOrmWriteRegion,
    SeaOrmOutboxSql,
    SqlxPlain,
    SqlxOutboxSql,
    SqlxPlainNoPing,
    LayerNoWorker,
    LayerWorker,
];

impl Variant {
    fn label(self) -> &'static str {
        match self {
            PgbenchPlain => "(1) pgbench: model row",
            PgbenchOutbox => "(2) pgbench: model row + outbox row",
            SeaOrmPlain => "(3) SeaORM, hand-written: model row",
            SeaOrmWriteRegion => "(3b) SeaORM: model row + write_region",
            SeaOrmOutboxSql => "(3c) SeaORM: model row + pgbench's outbox SQL",
            SqlxPlain => "(3d) sqlx, same pool: model row",
            SqlxOutboxSql => "(3e) sqlx, same pool: model row + outbox SQL",
            SqlxPlainNoPing => "(3f) sqlx, pool without acquire ping: model row",
            LayerNoWorker => "(4) OutboxLayer, flush = false, no worker",
            LayerWorker => "(5) OutboxLayer, flush = false, worker delivering",
        }
    }

    /// Whether each transaction writes an outbox row.
    fn writes_outbox(self) -> bool {
        !matches!(
            self,
            PgbenchPlain | SeaOrmPlain | SqlxPlain | SqlxPlainNoPing
        )
    }

    fn index(self) -> usize {
        VARIANTS.iter().position(|&v| v == self).unwrap()
    }
}

/// What one variant measured.
#[derive(Clone, Copy, Default)]
struct Measured {
    rate: f64,
    /// (5): outbox rows not yet delivered when the clients stopped, and all
    /// rows it wrote.
    backlog: Option<(u64, u64)>,
}

struct Bench {
    db: TestDatabase,
    no_ping: sqlx::PgPool,
    duration: Duration,
    pgbench: PathBuf,
    scripts: PathBuf,
    counter: Arc<AtomicI64>,
    problems: Vec<String>,
    checkpoint_refused: bool,
}

fn stmt(sql: &str, values: Vec<Value>) -> Statement {
    Statement::from_sql_and_values(sea_orm::DbBackend::Postgres, sql, values)
}

fn model(n: i64) -> Vec<Value> {
    vec![(n % ORGANIZATIONS).into(), format!("w{n}").into()]
}

fn message(n: i64) -> OutboxMessage<OutboxCategory> {
    OutboxMessage::new(
        OutboxCategory::BenchUpdate,
        ShardId(n % ORGANIZATIONS),
        ObjectId(n),
    )
}

/// The route of `latency.rs`: a model row and its outbox row in the
/// request's transaction.
async fn with_layer(tx: Tx, Path(n): Path<i64>) -> StatusCode {
    tx.execute_raw(stmt(MODEL_INSERT, model(n))).await.unwrap();
    write_region(&tx, message(n)).await.unwrap();
    StatusCode::CREATED
}

fn no_op_receivers(delivered: Arc<AtomicU64>) -> Receivers<OutboxCategory> {
    Receivers::new().on(
        OutboxCategory::BenchUpdate,
        move |message: Message<OutboxCategory>| {
            delivered.fetch_add(message.coalesced as u64, Ordering::Relaxed);
            async { Ok::<_, HandlerError>(()) }
        },
    )
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `CLIENTS` tasks, each running `one` with a fresh number after the other
/// until `duration` has passed: completed calls per second.
async fn clients<F, Fut>(duration: Duration, counter: &Arc<AtomicI64>, one: F) -> f64
where
    F: Fn(i64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (one, counter) = (one.clone(), counter.clone());
            tokio::spawn(async move {
                let mut done = 0u64;
                while Instant::now() < deadline {
                    one(counter.fetch_add(1, Ordering::Relaxed)).await;
                    done += 1;
                }
                done
            })
        })
        .collect();
    let mut done = 0;
    for task in tasks {
        done += task.await.unwrap();
    }
    done as f64 / started.elapsed().as_secs_f64()
}

/// Requests through `app`, `CLIENTS` at a time, for `duration`.
async fn requests(app: Router, duration: Duration, counter: &Arc<AtomicI64>) -> f64 {
    clients(duration, counter, move |n| {
        let app = app.clone();
        async move {
            let response = app
                .oneshot(
                    Request::post(format!("/widgets/{n}"))
                        .body(Body::empty())
                        .unwrap(),
                )
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::CREATED);
        }
    })
    .await
}

/// The two pgbench scripts, written to `dir`.
fn write_scripts(dir: &FsPath) {
    std::fs::create_dir_all(dir).unwrap();
    let header = format!(
        "\\set org random(0, {})\n\\set n random(1, 1000000000)\nBEGIN;\n\
         INSERT INTO widgets (organization_id, name) VALUES (:org, 'w' || :n);\n",
        ORGANIZATIONS - 1
    );
    std::fs::write(dir.join("plain.sql"), format!("{header}COMMIT;\n")).unwrap();
    let outbox = OUTBOX_INSERT.replace("$1", ":org").replace("$2", ":n");
    std::fs::write(
        dir.join("outbox.sql"),
        format!("{header}{outbox};\nCOMMIT;\n"),
    )
    .unwrap();
}

fn pgbench_binary() -> PathBuf {
    match std::env::var_os("OUTBOX_BENCH_PGBENCH") {
        Some(path) => PathBuf::from(path),
        None if FsPath::new(DEFAULT_PGBENCH).is_file() => PathBuf::from(DEFAULT_PGBENCH),
        None => PathBuf::from("pgbench"),
    }
}

/// The number after `prefix` on the line that starts with it.
fn figure(output: &str, prefix: &str) -> Option<f64> {
    output
        .lines()
        .find_map(|line| line.trim().strip_prefix(prefix))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse().ok())
}

async fn count(db: &DatabaseConnection, table: &str) -> u64 {
    let row = db
        .query_one_raw(stmt(&format!("SELECT count(*) AS n FROM {table}"), vec![]))
        .await
        .unwrap()
        .unwrap();
    u64::try_from(row.try_get::<i64>("", "n").unwrap()).unwrap()
}

impl Bench {
    /// Empties the tables and checkpoints, so that each variant starts from
    /// the same state (and no timed checkpoint falls inside one).
    async fn reset(&mut self) {
        self.db
            .db
            .execute_unprepared(
                "TRUNCATE widgets, region_outbox, outbox_claim_bucket, outbox_shard_state",
            )
            .await
            .unwrap();
        if let Err(error) = self.db.db.execute_unprepared("CHECKPOINT").await {
            if !self.checkpoint_refused {
                self.checkpoint_refused = true;
                eprintln!("CHECKPOINT refused ({error}): variants may start mid-cycle");
            }
        }
    }

    async fn pgbench(&mut self, script: &str) -> (f64, u64) {
        let seconds = self.duration.as_secs().max(1).to_string();
        let output = tokio::process::Command::new(&self.pgbench)
            .args(["-n", "-c", &CLIENTS.to_string(), "-j", "2", "-T", &seconds])
            .args(["-M", "prepared", "-f"])
            .arg(self.scripts.join(script))
            .arg(&self.db.url)
            .kill_on_drop(true)
            .output()
            .await
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.pgbench.display()));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "pgbench failed ({}): {stdout}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let tps = figure(&stdout, "tps = ")
            .unwrap_or_else(|| panic!("no `tps = ` in pgbench's output: {stdout}"));
        let processed = figure(&stdout, "number of transactions actually processed:")
            .unwrap_or_else(|| panic!("no transaction count in pgbench's output: {stdout}"));
        if figure(&stdout, "number of failed transactions:").is_some_and(|failed| failed > 0.0) {
            self.problems
                .push(format!("pgbench {script}: failed transactions: {stdout}"));
        }
        (tps, processed as u64)
    }

    async fn measure(&mut self, variant: Variant) -> Measured {
        self.reset().await;
        let (duration, counter) = (self.duration, self.counter.clone());
        let db = self.db.db.clone();
        let pool = db.clone();
        let mut expected = None;
        let mut backlog = None;
        let rate = match variant {
            PgbenchPlain | PgbenchOutbox => {
                let script = if variant == PgbenchPlain {
                    "plain.sql"
                } else {
                    "outbox.sql"
                };
                let (tps, processed) = self.pgbench(script).await;
                expected = Some(processed);
                tps
            }
            SeaOrmPlain | SeaOrmWriteRegion | SeaOrmOutboxSql => {
                clients(duration, &counter, move |n| {
                    let db = pool.clone();
                    async move {
                        let txn = db.begin().await.unwrap();
                        txn.execute_raw(stmt(MODEL_INSERT, model(n))).await.unwrap();
                        match variant {
                            SeaOrmWriteRegion => {
                                write_region(&txn, message(n)).await.unwrap();
                            }
                            SeaOrmOutboxSql => {
                                let rows = txn
                                    .query_all_raw(stmt(
                                        OUTBOX_INSERT,
                                        vec![(n % ORGANIZATIONS).into(), n.into()],
                                    ))
                                    .await
                                    .unwrap();
                                assert_eq!(rows.len(), 1);
                            }
                            _ => {}
                        }
                        txn.commit().await.unwrap();
                    }
                })
                .await
            }
            SqlxPlain | SqlxOutboxSql | SqlxPlainNoPing => {
                let pool = if variant == SqlxPlainNoPing {
                    self.no_ping.clone()
                } else {
                    db.get_postgres_connection_pool().clone()
                };
                clients(duration, &counter, move |n| {
                    let pool = pool.clone();
                    async move {
                        let mut tx = pool.begin().await.unwrap();
                        sqlx::query(MODEL_INSERT)
                            .bind(n % ORGANIZATIONS)
                            .bind(format!("w{n}"))
                            .execute(&mut *tx)
                            .await
                            .unwrap();
                        if variant == SqlxOutboxSql {
                            sqlx::query(OUTBOX_INSERT)
                                .bind(n % ORGANIZATIONS)
                                .bind(n)
                                .fetch_one(&mut *tx)
                                .await
                                .unwrap();
                        }
                        tx.commit().await.unwrap();
                    }
                })
                .await
            }
            LayerNoWorker => {
                let layer = OutboxLayer::new(db.clone(), no_op_receivers(Arc::default())).unwrap();
                let app = Router::new()
                    .route("/widgets/{n}", post(with_layer))
                    .route_layer(axum::middleware::from_fn(outbox_axum::defer_flush))
                    .layer(layer);
                requests(app, duration, &counter).await
            }
            LayerWorker => {
                let delivered = Arc::new(AtomicU64::new(0));
                let worker = OutboxWorker::builder(db.clone(), no_op_receivers(delivered.clone()))
                    .kinds([OutboxKind::Region])
                    .spawn()
                    .await
                    .unwrap();
                worker.ready().await;
                let app = Router::new()
                    .route("/widgets/{n}", post(with_layer))
                    .route_layer(axum::middleware::from_fn(outbox_axum::defer_flush))
                    .layer(worker.layer());
                let rate = requests(app, duration, &counter).await;
                let pending = worker
                    .drainer()
                    .view()
                    .pending_count(OutboxKind::Region)
                    .await
                    .unwrap();
                backlog = Some((pending, count(&db, "widgets").await));
                // Untimed: the worker catches up before the next variant.
                let deadline = Instant::now() + Duration::from_secs(120);
                while worker
                    .drainer()
                    .view()
                    .pending_count(OutboxKind::Region)
                    .await
                    .unwrap()
                    > 0
                    && Instant::now() < deadline
                {
                    worker.waker().wake(OutboxKind::Region).await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                worker.shutdown().await;
                let (written, delivered) = (
                    count(&db, "widgets").await,
                    delivered.load(Ordering::Relaxed),
                );
                let left = count(&db, "region_outbox").await;
                if delivered != written || left != 0 {
                    self.problems.push(format!(
                        "{}: {written} model rows, {delivered} outbox rows delivered, {left} left",
                        variant.label()
                    ));
                }
                rate
            }
        };
        // What was written: one model row per transaction, and an outbox row
        // with each where the variant writes one ((5) checked above).
        let widgets = count(&db, "widgets").await;
        let outbox = count(&db, "region_outbox").await;
        let want_outbox = if variant == LayerWorker {
            0
        } else if variant.writes_outbox() {
            widgets
        } else {
            0
        };
        if widgets == 0 || outbox != want_outbox || expected.is_some_and(|n| n != widgets) {
            self.problems.push(format!(
                "{}: {widgets} model rows, {outbox} outbox rows{}",
                variant.label(),
                expected.map_or(String::new(), |n| format!(", pgbench reports {n}"))
            ));
        }
        Measured { rate, backlog }
    }
}

#[tokio::main]
async fn main() {
    let seconds = std::env::var("OUTBOX_BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10u64);
    let own_cluster = std::env::var("DATABASE_URL").is_err();
    let dir = std::env::temp_dir().join(format!("outbox-bench-write-{}", std::process::id()));
    let admin = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => start_cluster_at(&dir, true).unwrap(),
    };
    let db = TestDatabase::postgres_on(&admin, "bench_write_path")
        .await
        .unwrap();
    db.db
        .execute_unprepared(
            "CREATE TABLE widgets (id bigserial PRIMARY KEY, organization_id bigint NOT NULL, name text NOT NULL)",
        )
        .await
        .unwrap();
    let no_ping = sqlx::postgres::PgPoolOptions::new()
        .max_connections(10)
        .test_before_acquire(false)
        .connect(&db.url)
        .await
        .unwrap();
    let scripts =
        std::env::temp_dir().join(format!("outbox-bench-write-scripts-{}", std::process::id()));
    write_scripts(&scripts);
    let mut bench = Bench {
        db,
        no_ping,
        duration: Duration::from_secs(seconds),
        pgbench: pgbench_binary(),
        scripts,
        counter: Arc::new(AtomicI64::new(0)),
        problems: Vec::new(),
        checkpoint_refused: false,
    };

    // Warm-up: both pools' connections opened, statements prepared.
    let warm_up = bench.duration;
    bench.duration = Duration::from_secs(1);
    for variant in [SeaOrmWriteRegion, SqlxPlainNoPing] {
        bench.measure(variant).await;
    }
    bench.duration = warm_up;

    let mut results = vec![[Measured::default(); VARIANTS.len()]; ROUNDS];
    for (round, measured) in results.iter_mut().enumerate() {
        let mut order = VARIANTS;
        order.rotate_left(round * VARIANTS.len() / ROUNDS);
        for variant in order {
            measured[variant.index()] = bench.measure(variant).await;
            eprintln!(
                "  round {}, {}: {:.0} req/s",
                round + 1,
                variant.label(),
                measured[variant.index()].rate
            );
        }
    }

    let rate = |variant: Variant| {
        median(
            &mut results
                .iter()
                .map(|round| round[variant.index()].rate)
                .collect::<Vec<_>>(),
        )
    };
    let ratio_of = |a: Variant, b: Variant| {
        median(
            &mut results
                .iter()
                .map(|round| round[a.index()].rate / round[b.index()].rate)
                .collect::<Vec<_>>(),
        )
    };
    eprintln!(
        "PostgreSQL write path, {CLIENTS} concurrent clients, {seconds} s per variant, medians \
         of {ROUNDS} interleaved rounds (ratios: medians of each round's ratio)"
    );
    let mut variants = Table::new(&["variant", "req/s", "÷ (1)", "÷ (3)"]);
    for variant in VARIANTS {
        variants.row([
            variant.label().to_owned(),
            thousands(rate(variant)),
            ratio(ratio_of(variant, PgbenchPlain)),
            ratio(ratio_of(variant, SeaOrmPlain)),
        ]);
    }
    let mut costs = Table::new(&["where the time goes", "figure"]);
    for (label, a, b) in [
        (
            "the outbox row, pgbench: (2) ÷ (1)",
            PgbenchOutbox,
            PgbenchPlain,
        ),
        (
            "the outbox row, SeaORM + write_region: (3b) ÷ (3)",
            SeaOrmWriteRegion,
            SeaOrmPlain,
        ),
        (
            "the outbox row, sqlx: (3e) ÷ (3d)",
            SqlxOutboxSql,
            SqlxPlain,
        ),
        (
            "the driver, SeaORM vs pgbench: (3) ÷ (1)",
            SeaOrmPlain,
            PgbenchPlain,
        ),
        (
            "the driver, SeaORM vs pgbench: (3c) ÷ (2)",
            SeaOrmOutboxSql,
            PgbenchOutbox,
        ),
        (
            "the driver, sqlx vs pgbench: (3d) ÷ (1)",
            SqlxPlain,
            PgbenchPlain,
        ),
        (
            "the driver, sqlx vs pgbench: (3e) ÷ (2)",
            SqlxOutboxSql,
            PgbenchOutbox,
        ),
        (
            "the driver without the acquire ping: (3f) ÷ (1)",
            SqlxPlainNoPing,
            PgbenchPlain,
        ),
        ("SeaORM over sqlx: (3) ÷ (3d)", SeaOrmPlain, SqlxPlain),
        (
            "SeaORM over sqlx: (3c) ÷ (3e)",
            SeaOrmOutboxSql,
            SqlxOutboxSql,
        ),
        ("the acquire ping: (3d) ÷ (3f)", SqlxPlain, SqlxPlainNoPing),
        (
            "write_region over its bare statement: (3b) ÷ (3c)",
            SeaOrmWriteRegion,
            SeaOrmOutboxSql,
        ),
        ("the layer: (4) ÷ (3b)", LayerNoWorker, SeaOrmWriteRegion),
        ("the drain alongside: (5) ÷ (4)", LayerWorker, LayerNoWorker),
    ] {
        costs.row([label.to_owned(), ratio(ratio_of(a, b))]);
    }
    let backlogs: Vec<(u64, u64)> = results
        .iter()
        .filter_map(|round| round[LayerWorker.index()].backlog)
        .collect();
    costs.row([
        "rows (5) had left to deliver when its clients stopped".to_owned(),
        backlogs
            .iter()
            .map(|&(left, written)| {
                format!(
                    "{} of {}",
                    thousands(left as f64),
                    thousands(written as f64)
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    ]);
    print!("{variants}\n{costs}");
    let problems = std::mem::take(&mut bench.problems);
    for problem in &problems {
        eprintln!("PROBLEM: {problem}");
    }

    let Bench {
        db,
        no_ping,
        scripts,
        ..
    } = bench;
    no_ping.close().await;
    db.db.clone().close().await.unwrap();
    // Dropped (the database with it) before the server stops.
    drop(db);
    let _ = std::fs::remove_dir_all(&scripts);
    if own_cluster {
        stop_cluster_at(&dir).unwrap();
    }
    if !problems.is_empty() {
        std::process::exit(1);
    }
}
