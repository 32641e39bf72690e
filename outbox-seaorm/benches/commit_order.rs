//! Two ways to keep a shard's rows in commit order (rule 11), measured side
//! by side in one run against a throwaway PostgreSQL cluster with default
//! durability (or `DATABASE_URL`).
//!
//! Run with `cargo bench -p outbox-seaorm --bench commit_order`.
//!
//! Writers: 8 clients, each in a loop `BEGIN; <insert one outbox row>;
//! COMMIT`, for 3 s per variant, variants interleaved over 3 rounds
//! (medians), on one hot shard and on 10,000 shards:
//!
//! - **no order** (main before rule 11): the plain insert;
//! - **shard lock** (the design shipped, `write_region`): the insert takes a
//!   transaction-level advisory lock of its shard before drawing its id, so
//!   one shard's writers commit one at a time;
//! - **xid horizon**: every row stamped with `pg_snapshot_xmax` of its
//!   transaction's snapshot at the insert (an extra `xid8` column), and the
//!   drain delivers a row only once `pg_snapshot_xmin` of the current
//!   snapshot has passed that stamp, i.e. every transaction that was running
//!   when the row was written has ended (any of them may hold a lower id of
//!   the shard). Writers never wait; the drain does.
//!
//! Then what each costs the drain: how many of 1,000 committed rows the
//! xid-horizon drain may deliver while one unrelated transaction (a report,
//! a migration, a stuck session) has been open since before they were
//! written: none, until it ends. The shard lock changes nothing in the
//! drain (the same claim statements).
//!
//! It prints both as Markdown tables, as `docs/benchmarks.md` shows them
//! (each design's rates also go to stderr as they are measured).

#![allow(missing_docs, clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId};
use outbox_testing::conformance::OutboxCategory;
use outbox_testing::database::{start_cluster_at, stop_cluster_at, TestDatabase};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement, TransactionTrait, Value};

use markdown::{ratio, thousands, Table};
use outbox_testing::bench as markdown;

const CLIENTS: usize = 8;
const RUN: Duration = Duration::from_secs(3);
const ROUNDS: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Design {
    NoOrder,
    ShardLock,
    XidHorizon,
    /// `write_region` itself (its statement locks the shard), for reference:
    /// the designs above are the same hand-written insert with or without
    /// what each adds.
    WriteRegion,
}

impl Design {
    fn label(self) -> &'static str {
        match self {
            Design::NoOrder => "no order (before rule 11)",
            Design::ShardLock => "shard lock (shipped)",
            Design::XidHorizon => "xid horizon",
            Design::WriteRegion => "write_region (shard lock)",
        }
    }
}

const INSERT: &str = "INSERT INTO region_outbox (shard_scope, shard_identifier, category, \
    object_identifier, payload, scheduled_from, scheduled_for, date_added, message_id) \
    VALUES (0, $1, 1, $2, '{\"v\": 1}', now(), '2016-08-01', now(), gen_random_uuid()) RETURNING id";

/// The shipped statement's shape for one shard: its row is selected under
/// a one-time filter that takes the lock, and its id drawn by the column
/// default after it.
const INSERT_LOCKED: &str = "INSERT INTO region_outbox (shard_scope, shard_identifier, \
    category, object_identifier, payload, scheduled_from, scheduled_for, date_added, message_id) \
    SELECT * FROM (VALUES (0, $1::bigint, 1, $2::bigint, '{\"v\": 1}'::jsonb, now(), \
    '2016-08-01'::timestamptz, now(), gen_random_uuid())) AS rows \
    WHERE (SELECT count(*) FROM (SELECT pg_advisory_xact_lock(1330774017, hashint8($1))) AS locks) > 0 \
    RETURNING id";

const INSERT_STAMPED: &str = "INSERT INTO region_outbox (shard_scope, shard_identifier, category, \
    object_identifier, payload, scheduled_from, scheduled_for, date_added, message_id, xact_bound) \
    VALUES (0, $1, 1, $2, '{\"v\": 1}', now(), '2016-08-01', now(), gen_random_uuid(), \
    pg_snapshot_xmax(pg_current_snapshot())) RETURNING id";

async fn write_one(db: &DatabaseConnection, design: Design, shard: i64, object: i64) {
    let txn = db.begin().await.unwrap();
    match design {
        Design::WriteRegion => {
            write_region(
                &txn,
                OutboxMessage::new(
                    OutboxCategory::OrganizationUpdate,
                    ShardId(shard),
                    ObjectId(object),
                )
                .with_payload(serde_json::json!({ "v": 1 })),
            )
            .await
            .unwrap();
        }
        Design::NoOrder | Design::ShardLock | Design::XidHorizon => {
            let sql = match design {
                Design::NoOrder => INSERT,
                Design::ShardLock => INSERT_LOCKED,
                _ => INSERT_STAMPED,
            };
            txn.query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                sql,
                [Value::from(shard), Value::from(object)],
            ))
            .await
            .unwrap();
        }
    }
    txn.commit().await.unwrap();
}

/// Commits per second of `CLIENTS` writers, on one shard or on many.
async fn writers(db: &DatabaseConnection, design: Design, hot: bool) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let (db, stop, done) = (db.clone(), stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut n: i64 = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let shard = if hot {
                    7
                } else {
                    (n * 7919 + client as i64 * 104_729) % 10_000
                };
                write_one(&db, design, shard, n).await;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(RUN).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

async fn count(db: &DatabaseConnection, sql: &str) -> i64 {
    db.query_one_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .unwrap()
        .unwrap()
        .try_get_by_index::<i64>(0)
        .unwrap()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main]
async fn main() {
    let own_cluster = std::env::var("DATABASE_URL").is_err();
    let dir = std::env::temp_dir().join(format!("outbox-bench-order-{}", std::process::id()));
    let admin = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => start_cluster_at(&dir, true).unwrap(),
    };
    let database = TestDatabase::postgres_on(&admin, "commit_order")
        .await
        .unwrap();
    let db = &database.db;
    db.execute_unprepared("ALTER TABLE region_outbox ADD COLUMN xact_bound xid8")
        .await
        .unwrap();

    let designs = [
        Design::NoOrder,
        Design::ShardLock,
        Design::XidHorizon,
        Design::WriteRegion,
    ];
    eprintln!(
        "Commit order on PostgreSQL (default durability): {CLIENTS} writers, \
         BEGIN; one outbox row; COMMIT; {}s per variant, median of {ROUNDS} interleaved rounds",
        RUN.as_secs()
    );
    let columns = [("one hot shard", true), ("10,000 shards", false)];
    // Per column, each design's "commits/s (ratio to no order)".
    let mut cells: Vec<Vec<String>> = Vec::new();
    for (label, hot) in columns {
        let mut rates = vec![Vec::new(); designs.len()];
        for _ in 0..ROUNDS {
            for (i, design) in designs.iter().enumerate() {
                db.execute_unprepared("TRUNCATE region_outbox")
                    .await
                    .unwrap();
                rates[i].push(writers(db, *design, hot).await);
            }
        }
        let base = median(&mut rates[0].clone());
        eprintln!("{label}:");
        let mut column = Vec::new();
        for (i, design) in designs.iter().enumerate() {
            let rate = median(&mut rates[i]);
            eprintln!(
                "  {:<28} {rate:>7.0} commits/s  {:.2}x no order",
                design.label(),
                rate / base
            );
            column.push(format!("{} ({})", thousands(rate), ratio(rate / base)));
        }
        cells.push(column);
    }
    let header = format!("commits/s, {CLIENTS} writers");
    let mut order = Table::new(&[header.as_str(), columns[0].0, columns[1].0]);
    for (i, design) in designs.iter().enumerate() {
        order.row([
            design.label().to_owned(),
            cells[0][i].clone(),
            cells[1][i].clone(),
        ]);
    }

    // What the xid horizon costs the drain: an unrelated transaction open
    // since before the rows were written holds every one of them back.
    db.execute_unprepared("TRUNCATE region_outbox")
        .await
        .unwrap();
    let long = db.begin().await.unwrap();
    long.execute_unprepared("SELECT pg_current_xact_id()")
        .await
        .unwrap();
    for n in 0..1_000 {
        write_one(db, Design::XidHorizon, n % 100, n).await;
    }
    let deliverable = "SELECT count(*) FROM region_outbox \
        WHERE xact_bound <= pg_snapshot_xmin(pg_current_snapshot())";
    let held = count(db, deliverable).await;
    long.rollback().await.unwrap();
    let after = count(db, deliverable).await;
    let mut horizon = Table::new(&[
        "xid horizon, 1,000 committed rows of 100 shards",
        "deliverable",
    ]);
    horizon.row([
        "while an unrelated transaction is open".to_owned(),
        thousands(held as f64),
    ]);
    horizon.row(["once it ended".to_owned(), thousands(after as f64)]);
    print!("{order}\n{horizon}");

    db.clone().close().await.unwrap();
    if own_cluster {
        stop_cluster_at(&dir).unwrap();
    }
}
