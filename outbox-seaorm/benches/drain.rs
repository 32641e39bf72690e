//! Drain throughput and write overhead on PostgreSQL, as ratios to a floor
//! measured in the same run.
//!
//! Run with `cargo bench -p outbox-seaorm --bench drain`.
//!
//! Uses `DATABASE_URL` when set; otherwise starts a throwaway cluster with
//! PostgreSQL's default durability (fsync on) under the system temp directory
//! and removes it afterwards. Prints, for 20,000 pre-filled messages drained by
//! one worker with a no-op receiver:
//!
//! - the floor: a bare loop of `DELETE … WHERE id IN (SELECT … LIMIT 500 FOR
//!   UPDATE SKIP LOCKED) RETURNING …` through the same driver;
//! - (a) 20,000 messages over 20,000 shards (also with two drain tasks), (b)
//!   over 100 shards, (c) 20,000 updates of 1,000 objects (coalescing), each
//!   with its ratio to the floor, in messages per second and in WAL bytes per
//!   message;
//! - the write overhead: a model row inserted in its own transaction with its
//!   outbox row vs without, as a ratio.

#![allow(missing_docs, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use outbox_core::{DrainConfig, Drainer, HandlerError, OutboxKind, Receivers};
use outbox_seaorm::testing::{start_cluster_at, stop_cluster_at, TestDatabase};
use outbox_seaorm::{write_region, write_region_many, OutboxMessage, SeaOrmStore};
use sea_orm::{ConnectionTrait, DatabaseConnection, Statement, TransactionTrait};
use serde_json::json;

outbox_core::registry! {
    BenchScope = 0 {
        BenchUpdate = 1,
    }
}

const MESSAGES: i64 = 20_000;

async fn fill(db: &DatabaseConnection, shards: i64, objects_per_shard: Option<i64>) {
    db.execute_unprepared("TRUNCATE region_outbox, outbox_claim_bucket, outbox_shard_state")
        .await
        .unwrap();
    let messages: Vec<OutboxMessage<OutboxCategory>> = (0..MESSAGES)
        .map(|n| {
            let shard = n % shards;
            let object = match objects_per_shard {
                Some(objects) => (n / shards) % objects,
                None => n,
            };
            OutboxMessage::new(OutboxCategory::BenchUpdate, shard, object)
                .with_payload(json!({ "n": n, "name": "some payload of a realistic size" }))
        })
        .collect();
    for chunk in messages.chunks(5_000) {
        write_region_many(db, chunk.to_vec()).await.unwrap();
    }
    db.execute_unprepared("VACUUM ANALYZE region_outbox")
        .await
        .unwrap();
}

async fn wal_position(db: &DatabaseConnection) -> String {
    let row = db
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT pg_current_wal_insert_lsn()::text AS lsn",
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get("", "lsn").unwrap()
}

async fn wal_since(db: &DatabaseConnection, start: &str) -> i64 {
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            db.get_database_backend(),
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint AS bytes",
            [start.into()],
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get("", "bytes").unwrap()
}

async fn floor(db: &DatabaseConnection) -> (Duration, i64) {
    fill(db, MESSAGES, None).await;
    let sql = "DELETE FROM region_outbox WHERE id IN (SELECT id FROM region_outbox ORDER BY id \
               LIMIT 500 FOR UPDATE SKIP LOCKED) RETURNING id, shard_scope, shard_identifier, \
               category, object_identifier, payload";
    let wal = wal_position(db).await;
    let started = Instant::now();
    loop {
        let rows = db
            .query_all_raw(Statement::from_string(db.get_database_backend(), sql))
            .await
            .unwrap();
        if rows.is_empty() {
            break;
        }
    }
    (started.elapsed(), wal_since(db, &wal).await)
}

async fn drain(
    db: &DatabaseConnection,
    shards: i64,
    objects: Option<i64>,
    tasks: usize,
) -> (Duration, usize, i64) {
    fill(db, shards, objects).await;
    let receivers = Receivers::new().on(OutboxCategory::BenchUpdate, |_message| async {
        Ok::<_, HandlerError>(())
    });
    let drainer =
        Drainer::new(SeaOrmStore::new(db.clone()).unwrap(), receivers).with_config(config());
    let wal = wal_position(db).await;
    let started = Instant::now();
    let loops: Vec<_> = (0..tasks)
        .map(|_| {
            let drainer = drainer.clone();
            tokio::spawn(async move {
                let mut deliveries = 0;
                loop {
                    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
                    deliveries += report.deliveries;
                    if report.is_empty() {
                        return deliveries;
                    }
                }
            })
        })
        .collect();
    let mut deliveries = 0;
    for drain_loop in loops {
        deliveries += drain_loop.await.unwrap();
    }
    let elapsed = started.elapsed();
    let wal = wal_since(db, &wal).await;
    assert_eq!(
        drainer
            .admin()
            .pending_count(OutboxKind::Region)
            .await
            .unwrap(),
        0
    );
    (elapsed, deliveries, wal)
}

/// The drain's tuning: defaults, or `OUTBOX_BENCH_BATCH_SIZE` to explore.
fn config() -> DrainConfig {
    match std::env::var("OUTBOX_BENCH_BATCH_SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(rows) => DrainConfig::default().batch_size(rows),
        None => DrainConfig::default(),
    }
}

async fn write_overhead(db: &DatabaseConnection) -> (Duration, Duration) {
    db.execute_unprepared(
        "CREATE TABLE IF NOT EXISTS bench_model (id bigserial PRIMARY KEY, organization_id bigint NOT NULL, name text NOT NULL)",
    )
    .await
    .unwrap();
    let insert = |n: i64| {
        Statement::from_sql_and_values(
            db.get_database_backend(),
            "INSERT INTO bench_model (organization_id, name) VALUES ($1, $2)",
            [n.into(), format!("model {n}").into()],
        )
    };
    let rounds = 2_000;
    let mut without = Duration::ZERO;
    let mut with = Duration::ZERO;
    // Interleave the two so that noise hits both alike.
    for n in 0..rounds {
        let started = Instant::now();
        let txn = db.begin().await.unwrap();
        txn.execute_raw(insert(n)).await.unwrap();
        txn.commit().await.unwrap();
        without += started.elapsed();

        let started = Instant::now();
        let txn = db.begin().await.unwrap();
        txn.execute_raw(insert(n)).await.unwrap();
        write_region(
            &txn,
            OutboxMessage::new(OutboxCategory::BenchUpdate, n, n).with_payload(json!({ "n": n })),
        )
        .await
        .unwrap();
        txn.commit().await.unwrap();
        with += started.elapsed();
    }
    (without, with)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn rate(messages: i64, elapsed: Duration) -> f64 {
    messages as f64 / elapsed.as_secs_f64()
}

#[tokio::main]
async fn main() {
    let own_cluster = std::env::var("DATABASE_URL").is_err();
    let dir = std::env::temp_dir().join(format!("outbox-bench-pg-{}", std::process::id()));
    let admin = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => start_cluster_at(&dir, true).unwrap(),
    };
    let database = TestDatabase::postgres_on(&admin, "bench").await.unwrap();
    let db = &database.db;

    // Each figure is the median of REPEATS runs; the floor is measured right
    // before each scenario run so that both see the same machine.
    const REPEATS: usize = 3;
    let scenarios = [
        ("(a) 20,000 shards, 1 message each", MESSAGES, None, 1),
        ("(a') the same, 2 drain tasks", MESSAGES, None, 2),
        ("(b) 100 shards, 200 messages each", 100, None, 1),
        (
            "(c) 1,000 objects x 20 updates (coalescing)",
            100,
            Some(10),
            1,
        ),
    ];
    let mut floors = Vec::new();
    let mut floor_wal = Vec::new();
    let mut results = vec![Vec::new(); scenarios.len()];
    let mut wal = vec![Vec::new(); scenarios.len()];
    let mut deliveries = vec![0; scenarios.len()];
    for _ in 0..REPEATS {
        for (i, (_, shards, objects, tasks)) in scenarios.iter().enumerate() {
            let (elapsed, bytes) = floor(db).await;
            floors.push(rate(MESSAGES, elapsed));
            floor_wal.push(bytes as f64 / MESSAGES as f64);
            let (elapsed, delivered, bytes) = drain(db, *shards, *objects, *tasks).await;
            results[i].push(rate(MESSAGES, elapsed));
            wal[i].push(bytes as f64 / MESSAGES as f64);
            deliveries[i] = delivered;
        }
    }
    let floor_rate = median(&mut floors);
    let floor_wal = median(&mut floor_wal);
    println!(
        "PostgreSQL drain of {MESSAGES} pre-filled messages, one process, no-op receiver \
         (median of {REPEATS} runs)"
    );
    println!(
        "  floor (DELETE ... LIMIT 500 FOR UPDATE SKIP LOCKED RETURNING): {floor_rate:>7.0} msgs/s, \
         {floor_wal:>5.0} WAL bytes/msg"
    );
    for (i, (label, _, _, _)) in scenarios.iter().enumerate() {
        let msgs = median(&mut results[i]);
        let bytes = median(&mut wal[i]);
        println!(
            "  {label:<44}: {msgs:>7.0} msgs/s ({:.2}x floor), {bytes:>5.0} WAL bytes/msg ({:.2}x floor), \
             {} deliveries",
            msgs / floor_rate,
            bytes / floor_wal,
            deliveries[i]
        );
    }
    let (without, with) = write_overhead(db).await;
    println!(
        "write overhead: model insert + outbox row vs model insert alone, one transaction each: {:.3}x ({:.0} vs {:.0} us per transaction)",
        with.as_secs_f64() / without.as_secs_f64(),
        with.as_secs_f64() * 1e6 / 2_000.0,
        without.as_secs_f64() * 1e6 / 2_000.0,
    );
    db.clone().close().await.unwrap();
    if own_cluster {
        stop_cluster_at(&dir).unwrap();
    }
}
