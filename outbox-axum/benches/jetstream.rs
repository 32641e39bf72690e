//! Drain throughput through the JetStream sink, as a ratio of the plain
//! drain (a no-op receiver) measured in the same run, on PostgreSQL.
//!
//! Run with `cargo bench -p outbox-axum --bench jetstream`.
//!
//! Uses `DATABASE_URL` when set; otherwise starts a throwaway cluster with
//! PostgreSQL's default durability (fsync on) and removes it afterwards.
//! Starts Debian's `nats-server` with JetStream (`apt-get install -y
//! nats-server`) through `outbox_testing::nats::NatsServer`, and
//! publishes into a file-storage stream (`JetStreamSink::stream_config`).
//!
//! For each scenario, 20,000 pre-filled messages (over 20,000 shards, and
//! over 100), each repeat drains them once with a no-op receiver (plain),
//! once through the sink's `receiver()` (each shard task awaits each
//! publish's acknowledgement) and once through its `batch_receiver()`
//! (`Receivers::on_batch`: waves of the next message of every shard of a
//! round, published pipelined), each right after its own fill, with one
//! drain task and the default `DrainConfig` (16 shards delivered at once;
//! 64 in (a')). JetStream alone publishes as many messages from as many
//! tasks as the drain delivers shards at once, each awaiting its
//! acknowledgement before its next publish, without a database. The sink's
//! columns are over the lower of (plain, JetStream alone), the ratio the
//! issue tracker asks to keep at 0.7 or more; it prints the medians of 5
//! repeats (ratios: the median of the per-repeat ratios). The "as the worker" rows run
//! the worker's loop (`outbox_core::worker`, as `OutboxWorker` runs it)
//! with `DEFAULT_ROUNDS_IN_FLIGHT` rounds in flight, from its start until
//! the outbox is empty (JetStream alone then with as many publishers as
//! deliveries in flight). `OUTBOX_BENCH_ONLY='(a)'` runs
//! only the scenarios whose label starts so; `OUTBOX_BENCH_BATCH_ONLY=1`
//! leaves out the `receiver()` column (its cells stay empty). It prints a
//! Markdown table, as `docs/benchmarks.md` shows it (each scenario's row
//! also goes to stderr as it ends).

#![allow(missing_docs, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use outbox_core::sink::jetstream::{async_nats, JetStreamSink};
use outbox_core::worker::WorkerBuilder;
use outbox_core::{DrainConfig, Drainer, HandlerError, OutboxKind, Receivers};
use outbox_seaorm::SeaOrmStore;
use outbox_testing::database::{start_cluster_at, stop_cluster_at, TestDatabase};
use outbox_testing::nats::NatsServer;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};

use markdown::{ratio, thousands, Table};
use outbox_testing::bench as markdown;

outbox_core::registry! {
    BenchScope = 0 {
        BenchUpdate = 1,
    }
}

const MESSAGES: i64 = 20_000;
const REPEATS: usize = 5;
const STREAM: &str = "BENCH";
/// Shards the drain delivers at once by default (`DrainConfig::concurrency`).
const DEFAULT_CONCURRENCY: usize = outbox_core::drain::DEFAULT_CONCURRENCY;

/// Fills the outbox with `MESSAGES` rows over `shards` shards, one object per
/// message, with a message id each, as the write API would.
async fn fill(db: &DatabaseConnection, shards: i64) {
    db.execute_unprepared("TRUNCATE region_outbox, outbox_claim_bucket, outbox_shard_state")
        .await
        .unwrap();
    db.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "INSERT INTO region_outbox (shard_scope, shard_identifier, category, object_identifier, \
         payload, message_id)
         SELECT 0, n % $1, 1, n,
                jsonb_build_object('n', n, 'name', 'some payload of a realistic size'),
                gen_random_uuid()
         FROM generate_series(0, $2 - 1) n",
        [shards.into(), MESSAGES.into()],
    ))
    .await
    .unwrap();
    db.execute_unprepared("VACUUM ANALYZE region_outbox")
        .await
        .unwrap();
}

/// Drains the outbox to empty with `receivers`: one drain task (`rounds`
/// 1: one round after the other), or the worker's loop with `rounds` in
/// flight (`outbox_core::worker`, as `OutboxWorker` runs it): elapsed time.
async fn drain(
    db: &DatabaseConnection,
    receivers: Receivers<OutboxCategory>,
    concurrency: usize,
    rounds: usize,
) -> Duration {
    let drainer = Drainer::builder(SeaOrmStore::new(db.clone()).unwrap(), receivers)
        .config(DrainConfig::default().concurrency(concurrency))
        .build();
    if rounds > 1 {
        return drain_as_worker(drainer, rounds).await;
    }
    let started = Instant::now();
    // Each task claims until a claim finds nothing it can take; the last
    // one to stop found nothing due.
    let tasks: Vec<_> = (0..rounds)
        .map(|_| {
            let drainer = drainer.clone();
            tokio::spawn(async move {
                let mut deliveries = 0;
                loop {
                    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
                    assert!(report.failures.is_empty(), "{:?}", report.failures);
                    deliveries += report.deliveries;
                    if report.is_empty() {
                        return deliveries;
                    }
                }
            })
        })
        .collect();
    let mut deliveries = 0;
    for task in tasks {
        deliveries += task.await.unwrap();
    }
    let elapsed = started.elapsed();
    assert_eq!(deliveries, MESSAGES as usize);
    elapsed
}

/// The worker's loop over `drainer`, `rounds` in flight, from its start
/// until the outbox is empty (read every 2 ms; a receiver that fails
/// leaves rows, and the bench stops after two minutes): elapsed time.
async fn drain_as_worker(drainer: Drainer<OutboxCategory>, rounds: usize) -> Duration {
    let view = drainer.view();
    let started = Instant::now();
    let worker = WorkerBuilder::new(drainer)
        .kinds([OutboxKind::Region])
        .rounds_in_flight(rounds)
        .gauge_interval(None)
        .spawn();
    while view.pending_count(OutboxKind::Region).await.unwrap() > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the worker left rows undelivered for two minutes"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = started.elapsed();
    worker.shutdown().await;
    elapsed
}

/// JetStream alone: `MESSAGES` publishes from `publishers` tasks, each
/// awaiting its acknowledgement before its next publish.
async fn publish_only(jetstream: &async_nats::jetstream::Context, publishers: usize) -> Duration {
    let started = Instant::now();
    let tasks: Vec<_> = (0..publishers)
        .map(|task| {
            let jetstream = jetstream.clone();
            tokio::spawn(async move {
                let mut n = task as i64;
                while n < MESSAGES {
                    let payload =
                        format!(r#"{{"n":{n},"name":"some payload of a realistic size"}}"#);
                    let mut headers = async_nats::HeaderMap::new();
                    headers.insert("Nats-Msg-Id", uuid_like(n));
                    jetstream
                        .publish_with_headers(
                            format!("outbox.BenchUpdate.region.{}", n % 100),
                            headers,
                            payload.into_bytes().into(),
                        )
                        .await
                        .unwrap()
                        .await
                        .unwrap();
                    n += publishers as i64;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    started.elapsed()
}

/// A message id unique within the run.
fn uuid_like(n: i64) -> String {
    format!("bench-{}-{n}", std::process::id())
}

async fn purge(jetstream: &async_nats::jetstream::Context) {
    jetstream
        .get_stream(STREAM)
        .await
        .unwrap()
        .purge()
        .await
        .unwrap();
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn rate(elapsed: Duration) -> f64 {
    MESSAGES as f64 / elapsed.as_secs_f64()
}

#[tokio::main]
async fn main() {
    let own_cluster = std::env::var("DATABASE_URL").is_err();
    let dir = std::env::temp_dir().join(format!("outbox-bench-pg-{}", std::process::id()));
    let admin = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => start_cluster_at(&dir, true).unwrap(),
    };
    let database = TestDatabase::postgres_on(&admin, "bench_jetstream")
        .await
        .unwrap();
    let db = &database.db;
    let nats = NatsServer::start().unwrap();
    let jetstream = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let sink = JetStreamSink::new(jetstream.clone());
    jetstream
        .create_stream(sink.stream_config(STREAM))
        .await
        .unwrap();

    eprintln!(
        "Drain of {MESSAGES} pre-filled messages on PostgreSQL, one drain task: a no-op receiver \
         (plain), JetStream alone, and the JetStream sink into a file-storage stream (nats-server \
         {}) as `receiver()` (one publish at a time per shard task) and as `batch_receiver()` \
         (waves of many shards, pipelined); medians of {REPEATS} repeats",
        nats_version()
    );
    let mut table = Table::new(&[
        "scenario",
        "plain msgs/s",
        "JetStream alone msgs/s",
        "receiver() msgs/s",
        "÷ min",
        "batch_receiver() msgs/s",
        "÷ min",
    ]);
    let rounds_in_flight = outbox_core::worker::DEFAULT_ROUNDS_IN_FLIGHT;
    // One scenario, by the start of its label: `OUTBOX_BENCH_ONLY='(b)'`.
    let only = std::env::var("OUTBOX_BENCH_ONLY").ok();
    // `OUTBOX_BENCH_BATCH_ONLY=1`: without the `receiver()` column (to
    // profile the batch receiver).
    let batch_only = std::env::var_os("OUTBOX_BENCH_BATCH_ONLY").is_some();
    for (label, shards, concurrency, rounds) in [
        (
            "(a) 20,000 shards × 1 message",
            20_000,
            DEFAULT_CONCURRENCY,
            1,
        ),
        ("(a') the same, concurrency 64", 20_000, 64, 1),
        ("(b) 100 shards × 200 messages", 100, DEFAULT_CONCURRENCY, 1),
        (
            "(a) as the worker: 4 rounds",
            20_000,
            DEFAULT_CONCURRENCY,
            rounds_in_flight,
        ),
        (
            "(b) as the worker: 4 rounds",
            100,
            DEFAULT_CONCURRENCY,
            rounds_in_flight,
        ),
    ] {
        if !only
            .as_ref()
            .is_none_or(|only| label.starts_with(only.as_str()))
        {
            continue;
        }
        let (mut plain, mut alone, mut single, mut batched, mut single_of_min, mut batch_of_min) = (
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        );
        for _ in 0..REPEATS {
            fill(db, shards).await;
            let no_op = Receivers::new().on(OutboxCategory::BenchUpdate, |_message| async {
                Ok::<_, HandlerError>(())
            });
            let plain_rate = rate(drain(db, no_op, concurrency, rounds).await);
            let single_rate = if batch_only {
                f64::NAN
            } else {
                fill(db, shards).await;
                purge(&jetstream).await;
                let through = Receivers::new().on(OutboxCategory::BenchUpdate, sink.receiver());
                rate(drain(db, through, concurrency, rounds).await)
            };
            fill(db, shards).await;
            purge(&jetstream).await;
            let through =
                Receivers::new().on_batch(OutboxCategory::BenchUpdate, sink.batch_receiver());
            let batch_rate = rate(drain(db, through, concurrency, rounds).await);
            purge(&jetstream).await;
            // As many publishers as the drain has deliveries in flight.
            let alone_rate = rate(publish_only(&jetstream, concurrency * rounds).await);
            purge(&jetstream).await;
            let floor = plain_rate.min(alone_rate);
            plain.push(plain_rate);
            alone.push(alone_rate);
            single.push(single_rate);
            batched.push(batch_rate);
            single_of_min.push(single_rate / floor);
            batch_of_min.push(batch_rate / floor);
        }
        let row = [
            label.to_owned(),
            thousands(median(&mut plain)),
            thousands(median(&mut alone)),
            thousands(median(&mut single)),
            ratio(median(&mut single_of_min)),
            thousands(median(&mut batched)),
            ratio(median(&mut batch_of_min)),
        ];
        eprintln!("  {}", row.join("  "));
        table.row(row);
    }
    print!("{table}");
    drop(nats);
    db.clone().close().await.unwrap();
    drop(database);
    if own_cluster {
        stop_cluster_at(&dir).unwrap();
    }
}

/// The `nats-server` version, for the table's title.
fn nats_version() -> String {
    std::process::Command::new("nats-server")
        .arg("--version")
        .output()
        .ok()
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .map(|text| text.trim().trim_start_matches("nats-server: ").to_owned())
        .unwrap_or_else(|| "?".to_owned())
}
