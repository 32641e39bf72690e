//! Drain throughput, WAL and write overhead on PostgreSQL, as ratios to a
//! floor measured in the same run.
//!
//! Run with `cargo bench -p outbox-seaorm --bench drain`.
//!
//! Uses `DATABASE_URL` when set; otherwise starts a throwaway cluster with
//! PostgreSQL's default durability (fsync on) under the system temp directory
//! and removes it afterwards. For pre-filled messages drained by one process
//! (one drain task unless said otherwise) with a no-op receiver, it prints
//! two Markdown tables, as `docs/benchmarks.md` shows them:
//!
//! - the floor: a bare loop of `DELETE … WHERE id IN (SELECT … LIMIT 500 FOR
//!   UPDATE SKIP LOCKED) RETURNING …` through the same driver, over a table of
//!   the same size;
//! - (a) 20,000 messages over 20,000 shards, (a′) the same with two drain
//!   tasks, (aw) the same drained by the worker `OutboxWorker` runs, with its
//!   defaults (up to four rounds in flight, from its start until the last
//!   commit), (b)
//!   over 100 shards, (c) 20,000 updates of 1,000 objects
//!   (coalescing); (d) a 1,000,000-message backlog, 10 per shard, and (e) one
//!   per shard: each in messages per second and WAL bytes per message, with
//!   its ratio to the floor run right before it (medians of 5 such pairs;
//!   the backlogs, 1 pair);
//! - the write overhead: a model row inserted in its own transaction with its
//!   outbox row vs without.
//!
//! Each scenario's figures also go to stderr as it ends.
//!
//! `OUTBOX_BENCH_RING=1` drains the outbox tables migrated to the partition
//! ring (`outbox_migrations::OutboxRingMigrator`; the floor stays on its
//! plain table). `OUTBOX_BENCH_SKIP_BACKLOG=1` leaves out (d) and (e); `OUTBOX_BENCH_ONLY=a`
//! runs only scenario (a) (`a,aw`: those two); `OUTBOX_BENCH_SETUP_SQL` runs its
//! `;`-separated statements after the migrations (a table setting to try);
//! `OUTBOX_BENCH_BATCH_SIZE` sets the drain's batch size;
//! `OUTBOX_BENCH_WORKER=1` drains every scenario as (aw) does; `OUTBOX_BENCH_VERBOSE=1` prints each
//! pair's rates (stderr).

#![allow(missing_docs, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use outbox_core::DrainConfig;
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId};
use outbox_testing::database::{start_cluster_at, stop_cluster_at, TestDatabase};
use sea_orm::{ConnectionTrait, DatabaseConnection, TransactionTrait};
use serde_json::json;

use outbox_testing::bench as markdown;
mod support;
use markdown::{ratio, thousands, Table};
use support::{drain_all, drain_as_worker, fill, floor, median, rate, stmt, OutboxCategory};

/// One drain scenario.
struct Scenario {
    label: &'static str,
    messages: i64,
    shards: i64,
    /// Objects per shard (coalescing), or one object per message.
    objects_per_shard: Option<i64>,
    tasks: usize,
    /// Drained by the worker (`outbox_core::worker`) with its defaults
    /// instead of `tasks` loops of `drain_due`.
    worker: bool,
    repeats: usize,
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
    if scenario.worker || std::env::var("OUTBOX_BENCH_WORKER").is_ok_and(|v| v == "1") {
        drain_as_worker(db, config(), scenario.messages as usize).await
    } else {
        drain_all(db, config(), scenario.tasks).await
    }
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
            OutboxMessage::new(OutboxCategory::BenchUpdate, ShardId(n), ObjectId(n))
                .with_payload(json!({ "n": n })),
        )
        .await
        .unwrap();
        txn.commit().await.unwrap();
        with += started.elapsed();
    }
    (without, with)
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
    if std::env::var("OUTBOX_BENCH_RING").is_ok_and(|ring| ring == "1") {
        <outbox_migrations::OutboxRingMigrator as sea_orm_migration::MigratorTrait>::up(db, None)
            .await
            .unwrap();
        eprintln!("on the partition ring (OutboxRingMigrator)");
    }
    // Statements run once after the migrations, `;`-separated (one at a
    // time: `VACUUM` cannot run in a transaction), to try a table setting.
    if let Ok(setup) = std::env::var("OUTBOX_BENCH_SETUP_SQL") {
        for statement in setup.split(';').filter(|s| !s.trim().is_empty()) {
            db.execute_unprepared(statement).await.unwrap();
        }
        eprintln!("after: {setup}");
    }

    let mut scenarios = vec![
        Scenario {
            label: "(a) 20,000 shards, 1 message each",
            messages: 20_000,
            shards: 20_000,
            objects_per_shard: None,
            tasks: 1,
            worker: false,
            repeats: 5,
        },
        Scenario {
            label: "(a') the same, 2 drain tasks",
            messages: 20_000,
            shards: 20_000,
            objects_per_shard: None,
            tasks: 2,
            worker: false,
            repeats: 5,
        },
        Scenario {
            label: "(aw) the same, the worker's defaults",
            messages: 20_000,
            shards: 20_000,
            objects_per_shard: None,
            tasks: 1,
            worker: true,
            repeats: 5,
        },
        Scenario {
            label: "(b) 100 shards, 200 messages each",
            messages: 20_000,
            shards: 100,
            objects_per_shard: None,
            tasks: 1,
            worker: false,
            repeats: 5,
        },
        Scenario {
            label: "(c) 1,000 objects × 20 updates (coalescing)",
            messages: 20_000,
            shards: 100,
            objects_per_shard: Some(10),
            tasks: 1,
            worker: false,
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
            worker: false,
            repeats: 1,
        });
        scenarios.push(Scenario {
            label: "(e) 1,000,000 backlog, 1 per shard",
            messages: 1_000_000,
            shards: 1_000_000,
            objects_per_shard: None,
            tasks: 1,
            worker: false,
            repeats: 1,
        });
    }
    if let Ok(only) = std::env::var("OUTBOX_BENCH_ONLY") {
        let only: Vec<String> = only.split(',').map(|o| format!("({o})")).collect();
        scenarios.retain(|scenario| only.iter().any(|o| scenario.label.starts_with(o)));
    }
    eprintln!(
        "PostgreSQL drain of pre-filled messages, one process, no-op receiver; each figure \
         next to the floor measured right before it over as many rows"
    );
    let mut table = Table::new(&[
        "scenario",
        "floor msgs/s",
        "msgs/s",
        "÷ floor",
        "WAL B/msg",
        "WAL ÷ floor",
        "deliveries",
    ]);
    let verbose = std::env::var("OUTBOX_BENCH_VERBOSE").is_ok_and(|v| v == "1");
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
            if verbose {
                eprintln!(
                    "    {}: floor {floor_rate:.0}/s, ours {ours:.0}/s ({:.2}x)",
                    scenario.label,
                    ours / floor_rate
                );
            }
            our_wal.push(bytes as f64 / scenario.messages as f64);
            deliveries = delivered;
        }
        let row = [
            scenario.label.to_owned(),
            thousands(median(&mut floors)),
            thousands(median(&mut rates)),
            ratio(median(&mut ratios)),
            thousands(median(&mut our_wal)),
            ratio(median(&mut wal_ratios)),
            thousands(deliveries as f64),
        ];
        eprintln!("  {}", row.join("  "));
        table.row(row);
    }
    let (without, with) = write_overhead(db).await;
    let mut write = Table::new(&[
        "write, one transaction each",
        "µs per transaction",
        "÷ model row alone",
    ]);
    write.row([
        "model row alone".to_owned(),
        thousands(without.as_secs_f64() * 1e6 / 2_000.0),
        ratio(1.0),
    ]);
    write.row([
        "model row + outbox row".to_owned(),
        thousands(with.as_secs_f64() * 1e6 / 2_000.0),
        ratio(with.as_secs_f64() / without.as_secs_f64()),
    ]);
    print!("{table}\n{write}");
    db.clone().close().await.unwrap();
    drop(database);
    if own_cluster {
        stop_cluster_at(&dir).unwrap();
    }
}
