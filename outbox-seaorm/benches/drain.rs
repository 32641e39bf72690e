//! Drain throughput, WAL and write overhead on PostgreSQL, as ratios to a
//! floor measured in the same run.
//!
//! Run with `cargo bench -p outbox-seaorm --bench drain`.
//!
//! Uses `DATABASE_URL` when set; otherwise starts a throwaway cluster with
//! PostgreSQL's default durability (fsync on) under the system temp directory
//! and removes it afterwards. For pre-filled messages drained by one process
//! (one drain task unless said otherwise) with a no-op receiver, it prints:
//!
//! - the floor: a bare loop of `DELETE … WHERE id IN (SELECT … LIMIT 500 FOR
//!   UPDATE SKIP LOCKED) RETURNING …` through the same driver, over a table of
//!   the same size;
//! - (a) 20,000 messages over 20,000 shards, (a′) the same with two drain
//!   tasks, (b) over 100 shards, (c) 20,000 updates of 1,000 objects
//!   (coalescing); (d) a 1,000,000-message backlog, 10 per shard, and (e) one
//!   per shard: each in messages per second and WAL bytes per message, with
//!   its ratio to the floor run right before it (medians of 5 such pairs;
//!   the backlogs, 1 pair);
//! - the write overhead: a model row inserted in its own transaction with its
//!   outbox row vs without.
//!
//! `OUTBOX_BENCH_SKIP_BACKLOG=1` leaves out (d) and (e); `OUTBOX_BENCH_ONLY=a`
//! runs only scenario (a);
//! `OUTBOX_BENCH_BATCH_SIZE` sets the drain's batch size.

#![allow(missing_docs, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use outbox_core::{DrainConfig, Drainer, HandlerError, OutboxKind, Receivers};
use outbox_seaorm::testing::{start_cluster_at, stop_cluster_at, TestDatabase};
use outbox_seaorm::{write_region, OutboxMessage, SeaOrmStore};
use sea_orm::{ConnectionTrait, DatabaseConnection, Statement, TransactionTrait};
use serde_json::json;

outbox_core::registry! {
    BenchScope = 0 {
        BenchUpdate = 1,
    }
}

/// One drain scenario.
struct Scenario {
    label: &'static str,
    messages: i64,
    shards: i64,
    /// Objects per shard (coalescing), or one object per message.
    objects_per_shard: Option<i64>,
    tasks: usize,
    repeats: usize,
}

fn stmt(sql: &str, values: Vec<sea_orm::Value>) -> Statement {
    Statement::from_sql_and_values(sea_orm::DbBackend::Postgres, sql, values)
}

/// Fills the outbox with `messages` rows, as the write API would.
async fn fill(db: &DatabaseConnection, messages: i64, shards: i64, objects: Option<i64>) {
    db.execute_unprepared("TRUNCATE region_outbox, outbox_claim_bucket, outbox_shard_state")
        .await
        .unwrap();
    let object = match objects {
        Some(objects) => format!("(n / {shards}) % {objects}"),
        None => "n".to_owned(),
    };
    db.execute_raw(stmt(
        &format!(
            "INSERT INTO region_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
             SELECT 0, n % $1, 1, {object},
                    jsonb_build_object('n', n, 'name', 'some payload of a realistic size')
             FROM generate_series(0, $2 - 1) n"
        ),
        vec![shards.into(), messages.into()],
    ))
    .await
    .unwrap();
    db.execute_unprepared("VACUUM ANALYZE region_outbox")
        .await
        .unwrap();
}

async fn wal_position(db: &DatabaseConnection) -> String {
    let row = db
        .query_one_raw(stmt(
            "SELECT pg_current_wal_insert_lsn()::text AS lsn",
            vec![],
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get("", "lsn").unwrap()
}

async fn wal_since(db: &DatabaseConnection, start: &str) -> i64 {
    let row = db
        .query_one_raw(stmt(
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint AS bytes",
            vec![start.into()],
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get("", "bytes").unwrap()
}

/// The floor over `messages` rows: elapsed time and WAL bytes.
async fn floor(db: &DatabaseConnection, messages: i64) -> (Duration, i64) {
    fill(db, messages, messages, None).await;
    let sql = "DELETE FROM region_outbox WHERE id IN (SELECT id FROM region_outbox ORDER BY id \
               LIMIT 500 FOR UPDATE SKIP LOCKED) RETURNING id, shard_scope, shard_identifier, \
               category, object_identifier, payload";
    let wal = wal_position(db).await;
    let started = Instant::now();
    loop {
        let rows = db.query_all_raw(stmt(sql, vec![])).await.unwrap();
        if rows.is_empty() {
            break;
        }
    }
    (started.elapsed(), wal_since(db, &wal).await)
}

/// Our drain over the scenario: elapsed time, deliveries, WAL bytes.
async fn drain(db: &DatabaseConnection, scenario: &Scenario) -> (Duration, usize, i64) {
    fill(
        db,
        scenario.messages,
        scenario.shards,
        scenario.objects_per_shard,
    )
    .await;
    let receivers = Receivers::new().on(OutboxCategory::BenchUpdate, |_message| async {
        Ok::<_, HandlerError>(())
    });
    let drainer =
        Drainer::new(SeaOrmStore::new(db.clone()).unwrap(), receivers).with_config(config());
    let wal = wal_position(db).await;
    let started = Instant::now();
    let loops: Vec<_> = (0..scenario.tasks)
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
        stmt(
            "INSERT INTO bench_model (organization_id, name) VALUES ($1, $2)",
            vec![n.into(), format!("model {n}").into()],
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

    let mut scenarios = vec![
        Scenario {
            label: "(a) 20,000 shards, 1 message each",
            messages: 20_000,
            shards: 20_000,
            objects_per_shard: None,
            tasks: 1,
            repeats: 5,
        },
        Scenario {
            label: "(a') the same, 2 drain tasks",
            messages: 20_000,
            shards: 20_000,
            objects_per_shard: None,
            tasks: 2,
            repeats: 5,
        },
        Scenario {
            label: "(b) 100 shards, 200 messages each",
            messages: 20_000,
            shards: 100,
            objects_per_shard: None,
            tasks: 1,
            repeats: 5,
        },
        Scenario {
            label: "(c) 1,000 objects x 20 updates (coalescing)",
            messages: 20_000,
            shards: 100,
            objects_per_shard: Some(10),
            tasks: 1,
            repeats: 5,
        },
    ];
    if std::env::var("OUTBOX_BENCH_SKIP_BACKLOG").is_err() {
        scenarios.push(Scenario {
            label: "(d) 1,000,000 backlog, 10 per shard",
            messages: 1_000_000,
            shards: 100_000,
            objects_per_shard: None,
            tasks: 1,
            repeats: 1,
        });
        scenarios.push(Scenario {
            label: "(e) 1,000,000 backlog, 1 per shard",
            messages: 1_000_000,
            shards: 1_000_000,
            objects_per_shard: None,
            tasks: 1,
            repeats: 1,
        });
    }
    if let Ok(only) = std::env::var("OUTBOX_BENCH_ONLY") {
        scenarios.retain(|scenario| scenario.label.starts_with(&format!("({only})")));
    }
    println!(
        "PostgreSQL drain of pre-filled messages, one process, no-op receiver; each figure \
         next to the floor measured right before it over as many rows"
    );
    println!(
        "  {:<44}  {:>9} {:>9} {:>6}  {:>9} {:>6}  deliveries",
        "scenario", "floor/s", "msgs/s", "ratio", "WAL B/msg", "ratio"
    );
    for scenario in &scenarios {
        // Each run of ours right after a run of the floor; the ratios are
        // the median of those pairs (the machine's speed drifts between
        // pairs more than within one).
        let (mut floors, mut rates, mut ratios, mut wal_ratios) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut our_wal = Vec::new();
        let mut deliveries = 0;
        for _ in 0..scenario.repeats {
            let (elapsed, floor_bytes) = floor(db, scenario.messages).await;
            let floor_rate = rate(scenario.messages, elapsed);
            let (elapsed, delivered, bytes) = drain(db, scenario).await;
            let ours = rate(scenario.messages, elapsed);
            floors.push(floor_rate);
            rates.push(ours);
            ratios.push(ours / floor_rate);
            wal_ratios.push(bytes as f64 / floor_bytes as f64);
            our_wal.push(bytes as f64 / scenario.messages as f64);
            deliveries = delivered;
        }
        println!(
            "  {:<44}  {:>9.0} {:>9.0} {:>5.2}x  {:>9.0} {:>5.2}x  {deliveries}",
            scenario.label,
            median(&mut floors),
            median(&mut rates),
            median(&mut ratios),
            median(&mut our_wal),
            median(&mut wal_ratios),
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
    drop(database);
    if own_cluster {
        stop_cluster_at(&dir).unwrap();
    }
}
