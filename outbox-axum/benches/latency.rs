//! Background-path latency (NOTIFY vs polling; at one commit every 1 ms,
//! with and without the worker's gathering) and request throughput of a
//! small write endpoint, on PostgreSQL: without the outbox (a hand-written
//! transaction), through `OutboxLayer` with `flush = false` (the worker of
//! the process delivers, woken in-process), and with a synchronous flush of
//! three designs side by side: claimed inside the request's transaction
//! before its `COMMIT` (the layer's default: nothing sent after the commit,
//! the delete and release completed in the background), claimed after the
//! `COMMIT` (`OutboxLayer::claim_before_commit(false)`: one statement after
//! it), and the first design (`Drainer::drain_shard` after the commit:
//! claim and read, deliver, delete and release, two statements after it).
//!
//! Run with `cargo bench -p outbox-axum --bench latency`
//! (`OUTBOX_BENCH_SKIP_LATENCY=1`: the throughput table alone;
//! `OUTBOX_BENCH_ONLY=<part of a label>`: those variants, beside the two
//! the ratios are taken against). It prints the two Markdown tables of
//! `docs/benchmarks.md`; each figure also goes to stderr as it is measured.
//!
//! Uses `DATABASE_URL` when set; otherwise starts a throwaway cluster with
//! PostgreSQL's default durability (fsync on) and removes it afterwards.

#![allow(missing_docs, clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use axum::Router;
use outbox_axum::{OutboxWorker, Tx};
use outbox_core::{Drainer, HandlerError, Message, OutboxKind, Receivers};
use outbox_seaorm::{listener, write_region, ObjectId, OutboxMessage, ShardId};
use outbox_testing::database::{start_cluster_at, stop_cluster_at, TestDatabase};
use sea_orm::{ConnectionTrait, DatabaseConnection, Statement, TransactionTrait};
use tower::ServiceExt;

use markdown::{ratio, thousands, Table};
use outbox_testing::bench as markdown;

/// The payload both payload variants write: untyped JSON, or typed.
#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct BenchPayload {
    pub widget: i64,
    pub name: String,
    pub tags: Vec<String>,
}

impl outbox_core::Contract for BenchPayload {
    const VERSION: u32 = 2;
}

outbox_core::registry! {
    BenchScope = 0 {
        BenchUpdate = 1,
        BenchTyped = 2 (payload = BenchPayload),
    }
}

fn bench_payload(n: i64) -> BenchPayload {
    BenchPayload {
        widget: n,
        name: format!("w{n}"),
        tags: vec!["blue".to_owned(), "small".to_owned()],
    }
}

/// `flush = false`, a payload written untyped (`with_payload_of`).
async fn with_untyped_payload(tx: Tx, Path(n): Path<i64>) -> StatusCode {
    insert_widget(&tx, n).await;
    let message = OutboxMessage::new(
        OutboxCategory::BenchUpdate,
        ShardId(n % ORGANIZATIONS),
        ObjectId(n),
    )
    .with_payload_of(&bench_payload(n))
    .unwrap();
    write_region(&tx, message).await.unwrap();
    StatusCode::CREATED
}

/// `flush = false`, the same payload written typed (`OutboxMessage::typed`).
async fn with_typed_payload(tx: Tx, Path(n): Path<i64>) -> StatusCode {
    insert_widget(&tx, n).await;
    let message = OutboxMessage::typed(
        outbox_categories::BenchTyped,
        ShardId(n % ORGANIZATIONS),
        ObjectId(n),
        &bench_payload(n),
    )
    .unwrap();
    write_region(&tx, message).await.unwrap();
    StatusCode::CREATED
}

const LATENCY_MESSAGES: usize = 2_000;
/// Requests per measurement: `OUTBOX_BENCH_REQUESTS`, default 6,000.
fn requests() -> usize {
    std::env::var("OUTBOX_BENCH_REQUESTS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(6_000)
}
const CONCURRENCY: usize = 8;
/// Organizations (shards) the requests write to.
const ORGANIZATIONS: i64 = 1_000;

type Commits = Arc<Mutex<HashMap<i64, Instant>>>;

/// How the background path is measured.
struct Background {
    listen: bool,
    poll: Duration,
    /// One commit every so often.
    every: Duration,
    /// The worker's gather window under load.
    gather: Duration,
}

/// Sends messages from "another process" (its own pool) at a steady pace,
/// each committed with a NOTIFY, and returns commit-to-receiver latencies.
async fn latency(db: &TestDatabase, background: &Background) -> Vec<Duration> {
    let commits: Commits = Arc::default();
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let receivers = Receivers::new().on(OutboxCategory::BenchUpdate, {
        let (commits, latencies) = (commits.clone(), latencies.clone());
        move |message: Message<OutboxCategory>| {
            let received = Instant::now();
            let committed = commits.lock().unwrap().get(&message.id).copied();
            if let Some(committed) = committed {
                latencies
                    .lock()
                    .unwrap()
                    .push(received.saturating_duration_since(committed));
            }
            async { Ok::<_, HandlerError>(()) }
        }
    });
    let worker = OutboxWorker::builder(db.db.clone(), receivers)
        .listen(background.listen)
        .poll_interval(background.poll)
        .gather(background.gather)
        .kinds([OutboxKind::Region])
        .spawn()
        .await
        .unwrap();
    worker.ready().await;
    let writer = db.connect_again(2).await.unwrap();
    let mut pace = tokio::time::interval(background.every);
    for n in 0..LATENCY_MESSAGES as i64 {
        pace.tick().await;
        let txn = writer.begin().await.unwrap();
        let row = write_region(
            &txn,
            OutboxMessage::new(OutboxCategory::BenchUpdate, ShardId(n % 50), ObjectId(n)),
        )
        .await
        .unwrap();
        listener::notify(&txn, OutboxKind::Region).await.unwrap();
        // Recorded just before the commit so the receiver always finds it;
        // the commit's own time is part of the latency.
        commits.lock().unwrap().insert(row.id, Instant::now());
        txn.commit().await.unwrap();
    }
    while latencies.lock().unwrap().len() < LATENCY_MESSAGES {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await;
    writer.close().await.unwrap();
    let mut latencies = latencies.lock().unwrap().clone();
    latencies.sort();
    latencies
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

/// The model row every write endpoint inserts.
async fn insert_widget(conn: &impl ConnectionTrait, n: i64) {
    conn.execute_raw(Statement::from_sql_and_values(
        conn.get_database_backend(),
        "INSERT INTO widgets (organization_id, name) VALUES ($1, $2)",
        [n.into(), format!("w{n}").into()],
    ))
    .await
    .unwrap();
}

async fn with_layer(tx: Tx, Path(n): Path<i64>) -> StatusCode {
    insert_widget(&tx, n).await;
    write_region(
        &tx,
        OutboxMessage::new(
            OutboxCategory::BenchUpdate,
            ShardId(n % ORGANIZATIONS),
            ObjectId(n),
        ),
    )
    .await
    .unwrap();
    StatusCode::CREATED
}

/// The first design of the synchronous flush: the transaction by hand, then
/// `drain_shard` (claim and read, deliver, delete and release).
async fn drain_shard_after_commit(
    State((db, drainer)): State<(DatabaseConnection, Drainer<OutboxCategory>)>,
    Path(n): Path<i64>,
) -> StatusCode {
    let txn = db.begin().await.unwrap();
    insert_widget(&txn, n).await;
    let row = write_region(
        &txn,
        OutboxMessage::new(
            OutboxCategory::BenchUpdate,
            ShardId(n % ORGANIZATIONS),
            ObjectId(n),
        ),
    )
    .await
    .unwrap();
    txn.commit().await.unwrap();
    drainer.drain_shard(&row.shard, Some(row.id)).await.unwrap();
    StatusCode::CREATED
}

async fn hand_written(State(db): State<DatabaseConnection>, Path(n): Path<i64>) -> StatusCode {
    let txn = db.begin().await.unwrap();
    insert_widget(&txn, n).await;
    txn.commit().await.unwrap();
    StatusCode::CREATED
}

/// A write endpoint's setup.
enum Variant {
    Plain,
    Outbox(Setup),
}

/// How an endpoint with the outbox delivers.
enum Setup {
    Deferred {
        gather: Duration,
    },
    /// `flush = false` with a payload, typed or untyped.
    Payload {
        typed: bool,
    },
    Flushed {
        before_commit: bool,
    },
    FirstDesign,
}

impl Variant {
    /// One measurement: a worker of its own (none without the outbox), the
    /// requests, then the worker stopped and the rows left drained, so that
    /// no variant's rows are delivered during the next one's run.
    async fn measure(&self, db: &DatabaseConnection, offset: i64, requests: usize) -> f64 {
        let setup = match self {
            Variant::Plain => {
                let plain = Router::new()
                    .route("/widgets/{n}", post(hand_written))
                    .with_state(db.clone());
                return throughput(plain, offset, requests).await;
            }
            Variant::Outbox(setup) => setup,
        };
        let receivers = Receivers::new()
            .on(
                OutboxCategory::BenchUpdate,
                |_m: Message<OutboxCategory>| async { Ok::<_, HandlerError>(()) },
            )
            .on_typed(
                outbox_categories::BenchTyped,
                |_m: Message<OutboxCategory>, _p: BenchPayload| async { Ok::<_, HandlerError>(()) },
            );
        let gather = match setup {
            Setup::Deferred { gather } => *gather,
            _ => outbox_core::worker::DEFAULT_GATHER,
        };
        // The product's setup: a worker, and its layer on the routes.
        let worker = OutboxWorker::builder(db.clone(), receivers)
            .kinds([OutboxKind::Region])
            .gauge_interval(None)
            .gather(gather)
            .spawn()
            .await
            .unwrap();
        worker.ready().await;
        let app = match setup {
            Setup::Deferred { .. } => Router::new()
                .route("/widgets/{n}", post(with_layer))
                .route_layer(axum::middleware::from_fn(outbox_axum::defer_flush))
                .layer(worker.layer()),
            Setup::Payload { typed } => Router::new()
                .route(
                    "/widgets/{n}",
                    if *typed {
                        post(with_typed_payload)
                    } else {
                        post(with_untyped_payload)
                    },
                )
                .route_layer(axum::middleware::from_fn(outbox_axum::defer_flush))
                .layer(worker.layer()),
            Setup::Flushed { before_commit } => Router::new()
                .route("/widgets/{n}", post(with_layer))
                .layer(worker.layer().claim_before_commit(*before_commit)),
            Setup::FirstDesign => Router::new()
                .route("/widgets/{n}", post(drain_shard_after_commit))
                .with_state((db.clone(), worker.drainer().clone())),
        };
        let rate = throughput(app, offset, requests).await;
        // Untimed: the worker's rounds end, then what is left is drained
        // here, so that the next run starts from an empty outbox.
        let drainer = worker.drainer().clone();
        worker.shutdown().await;
        outbox_testing::drain_until_idle(&drainer, &[OutboxKind::Region])
            .await
            .unwrap();
        rate
    }
}

async fn throughput(app: Router, offset: i64, requests: usize) -> f64 {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..CONCURRENCY {
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            for i in (task..requests).step_by(CONCURRENCY) {
                let uri = format!("/widgets/{}", offset + i as i64);
                let response = app
                    .clone()
                    .oneshot(Request::post(uri).body(Body::empty()).unwrap())
                    .await
                    .unwrap();
                assert_eq!(response.status(), StatusCode::CREATED);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    requests as f64 / started.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let own_cluster = std::env::var("DATABASE_URL").is_err();
    let dir = std::env::temp_dir().join(format!("outbox-bench-axum-{}", std::process::id()));
    let admin = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => start_cluster_at(&dir, true).unwrap(),
    };
    let db = TestDatabase::postgres_on(&admin, "bench_axum")
        .await
        .unwrap();

    eprintln!(
        "PostgreSQL commit-to-receiver latency, background path, {LATENCY_MESSAGES} messages \
         committed one by one from another connection pool"
    );
    let (two_ms, one_ms) = (Duration::from_millis(2), Duration::from_millis(1));
    let gather = outbox_core::worker::DEFAULT_GATHER;
    let notify = |every, gather| Background {
        listen: true,
        poll: Duration::from_secs(1),
        every,
        gather,
    };
    let polling = |poll| Background {
        listen: false,
        poll,
        every: two_ms,
        gather,
    };
    let skip_latency = std::env::var_os("OUTBOX_BENCH_SKIP_LATENCY").is_some();
    let mut background_path = Table::new(&["background path, commit → receiver", "p50", "p99"]);
    for (label, background) in [
        (
            "NOTIFY (poll fallback 1 s), every 2 ms",
            notify(two_ms, gather),
        ),
        (
            "polling only, every 1 s, every 2 ms",
            polling(Duration::from_secs(1)),
        ),
        (
            "polling only, every 100 ms, every 2 ms",
            polling(Duration::from_millis(100)),
        ),
        ("NOTIFY, every 1 ms", notify(one_ms, gather)),
        (
            "NOTIFY, every 1 ms, no gathering",
            notify(one_ms, Duration::ZERO),
        ),
    ] {
        if skip_latency {
            break;
        }
        let latencies = latency(&db, &background).await;
        let (p50, p99) = (
            markdown::ms(percentile(&latencies, 0.50)),
            markdown::ms(percentile(&latencies, 0.99)),
        );
        eprintln!("  {label}: p50 {p50}, p99 {p99}");
        background_path.row([label.to_owned(), p50, p99]);
    }

    db.db
        .execute_unprepared(
            "CREATE TABLE widgets (id bigserial PRIMARY KEY, organization_id bigint NOT NULL, name text NOT NULL)",
        )
        .await
        .unwrap();
    let variants = [
        (
            "without the outbox (hand-written transaction)",
            Variant::Plain,
        ),
        (
            "OutboxLayer, flush = false (this process's worker delivers)",
            Variant::Outbox(Setup::Deferred {
                gather: outbox_core::worker::DEFAULT_GATHER,
            }),
        ),
        (
            "OutboxLayer, flush = false, the worker claiming at every wake-up",
            Variant::Outbox(Setup::Deferred {
                gather: Duration::ZERO,
            }),
        ),
        (
            "OutboxLayer, synchronous flush claimed before the COMMIT (default)",
            Variant::Outbox(Setup::Flushed {
                before_commit: true,
            }),
        ),
        (
            "OutboxLayer, synchronous flush claimed after the COMMIT",
            Variant::Outbox(Setup::Flushed {
                before_commit: false,
            }),
        ),
        (
            "first design: drain_shard after the COMMIT (claim+read, delete+release)",
            Variant::Outbox(Setup::FirstDesign),
        ),
        (
            "OutboxLayer, flush = false, payload untyped (with_payload_of)",
            Variant::Outbox(Setup::Payload { typed: false }),
        ),
        (
            "OutboxLayer, flush = false, payload typed (OutboxMessage::typed, its version stored)",
            Variant::Outbox(Setup::Payload { typed: true }),
        ),
    ];
    // `OUTBOX_BENCH_ONLY`: the variants whose label contains it, beside the
    // two the ratios are taken against.
    let only = std::env::var("OUTBOX_BENCH_ONLY").ok();
    let variants: Vec<_> = variants
        .into_iter()
        .enumerate()
        .filter(|(index, (label, _))| {
            *index < 2 || only.as_deref().is_none_or(|only| label.contains(only))
        })
        .map(|(_, variant)| variant)
        .collect();
    // Interleaved, median of three runs each, so that noise hits all alike.
    let requests = requests();
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    for round in 0..3i64 {
        for (index, (label, variant)) in variants.iter().enumerate() {
            let base = (round * variants.len() as i64 + index as i64) * 10 * requests as i64;
            let rate = variant.measure(&db.db, base, requests).await;
            eprintln!("  round {}, {label}: {rate:.0} req/s", round + 1);
            rates[index].push(rate);
        }
    }
    let medians: Vec<f64> = rates.iter_mut().map(|rates| median(rates)).collect();
    eprintln!(
        "request throughput, {requests} requests over {ORGANIZATIONS} organizations, \
         {CONCURRENCY} concurrent, median of 3 (a model row, an outbox row, then what each \
         variant does after the commit; each run with a worker of its own, stopped and \
         the rest drained before the next)"
    );
    let mut endpoints = Table::new(&[
        "write endpoint",
        "req/s",
        "÷ without the outbox",
        "÷ flush = false",
    ]);
    for ((label, _), rate) in variants.iter().zip(&medians) {
        endpoints.row([
            (*label).to_owned(),
            thousands(*rate),
            ratio(rate / medians[0]),
            ratio(rate / medians[1]),
        ]);
    }
    if skip_latency {
        print!("{endpoints}");
    } else {
        print!("{background_path}\n{endpoints}");
    }
    db.db.close().await.unwrap();
    if own_cluster {
        stop_cluster_at(&dir).unwrap();
    }
}
