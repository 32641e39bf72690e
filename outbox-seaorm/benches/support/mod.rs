//! What the drain benches share: the floor, the fill of the outbox, WAL
//! measurement, and our drain over a pre-filled outbox. Included by
//! `benches/drain.rs` and by the peer comparison in `bench-peers/`.

use std::time::{Duration, Instant};

use outbox_core::{DrainConfig, Drainer, HandlerError, OutboxKind, Receivers};
use outbox_seaorm::SeaOrmStore;
use sea_orm::{ConnectionTrait, DatabaseConnection, Statement};

outbox_core::registry! {
    BenchScope = 0 {
        BenchUpdate = 1,
    }
}

/// A PostgreSQL statement.
pub fn stmt(sql: &str, values: Vec<sea_orm::Value>) -> Statement {
    Statement::from_sql_and_values(sea_orm::DbBackend::Postgres, sql, values)
}

/// Fills the outbox with `messages` rows over `shards` shards (one object
/// per message, or `objects` per shard), as the write API would.
pub async fn fill(db: &DatabaseConnection, messages: i64, shards: i64, objects: Option<i64>) {
    fill_table(db, "region_outbox", messages, shards, objects).await;
}

/// The floor's table: the outbox's columns and indexes on a plain table
/// (the outbox tables are partitioned; the floor is the simplest storage).
async fn create_floor_table(db: &DatabaseConnection) {
    db.execute_unprepared(
        "CREATE TABLE IF NOT EXISTS floor_outbox
             (LIKE region_outbox INCLUDING DEFAULTS INCLUDING IDENTITY, PRIMARY KEY (id));
         CREATE INDEX IF NOT EXISTS floor_outbox_due ON floor_outbox (scheduled_for, id);
         CREATE INDEX IF NOT EXISTS floor_outbox_shard
             ON floor_outbox (shard_scope, shard_identifier, id);",
    )
    .await
    .unwrap();
}

async fn fill_table(
    db: &DatabaseConnection,
    table: &str,
    messages: i64,
    shards: i64,
    objects: Option<i64>,
) {
    db.execute_unprepared(&format!(
        "TRUNCATE {table}, outbox_claim_bucket, outbox_shard_state"
    ))
    .await
    .unwrap();
    let object = match objects {
        Some(objects) => format!("(n / {shards}) % {objects}"),
        None => "n".to_owned(),
    };
    db.execute_raw(stmt(
        &format!(
            "INSERT INTO {table} (shard_scope, shard_identifier, category, object_identifier, payload)
             SELECT 0, n % $1, 1, {object},
                    jsonb_build_object('n', n, 'name', 'some payload of a realistic size')
             FROM generate_series(0, $2 - 1) n"
        ),
        vec![shards.into(), messages.into()],
    ))
    .await
    .unwrap();
    db.execute_unprepared(&format!("VACUUM ANALYZE {table}"))
        .await
        .unwrap();
}

/// The current WAL insert position.
pub async fn wal_position(db: &DatabaseConnection) -> String {
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

/// WAL bytes written since `start`.
pub async fn wal_since(db: &DatabaseConnection, start: &str) -> i64 {
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

/// The floor over `messages` rows: a bare loop of `DELETE … WHERE id IN
/// (SELECT … LIMIT 500 FOR UPDATE SKIP LOCKED) RETURNING …` through the same
/// driver, on a plain table of the outbox's columns and indexes
/// (`floor_outbox`). Elapsed time and WAL bytes.
pub async fn floor(db: &DatabaseConnection, messages: i64) -> (Duration, i64) {
    create_floor_table(db).await;
    fill_table(db, "floor_outbox", messages, messages, None).await;
    let sql = "DELETE FROM floor_outbox WHERE id IN (SELECT id FROM floor_outbox ORDER BY id \
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

/// Our drain of whatever the outbox holds, by `tasks` drain loops with a
/// no-op receiver, until it is empty: elapsed time, deliveries, WAL bytes.
pub async fn drain_all(
    db: &DatabaseConnection,
    config: DrainConfig,
    tasks: usize,
) -> (Duration, usize, i64) {
    let receivers = Receivers::new().on(OutboxCategory::BenchUpdate, |_message| async {
        Ok::<_, HandlerError>(())
    });
    let drainer = Drainer::builder(SeaOrmStore::new(db.clone()).unwrap(), receivers)
        .config(config)
        .build();
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
    (elapsed, deliveries, drained_since(db, &drainer, &wal).await)
}

/// The WAL bytes written since `wal`, once `drainer` left nothing pending
/// (asserted).
async fn drained_since<C: outbox_core::Category>(
    db: &DatabaseConnection,
    drainer: &Drainer<C>,
    wal: &str,
) -> i64 {
    let bytes = wal_since(db, wal).await;
    assert_eq!(
        drainer
            .view()
            .pending_count(OutboxKind::Region)
            .await
            .unwrap(),
        0
    );
    bytes
}

/// The drain as a service runs it: the worker `OutboxWorker` spawns
/// (`outbox_core::worker`, here without a wake-up source) with its defaults
/// (`DEFAULT_ROUNDS_IN_FLIGHT` rounds at once, each claimed as soon as the
/// last one's claim returned), from its start until `messages` rows have
/// been acknowledged (coalesced rows included) and its rounds have ended:
/// elapsed time, deliveries, WAL bytes. The backlog gauges and the
/// history's pruning are off (they have nothing to do with the drain's rate
/// and would run once at start).
// Not used by the peer comparison, which includes this file too.
#[allow(dead_code)]
pub async fn drain_as_worker(
    db: &DatabaseConnection,
    config: DrainConfig,
    messages: usize,
) -> (Duration, usize, i64) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let delivered = Arc::new(AtomicUsize::new(0));
    let acknowledged = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(tokio::sync::Notify::new());
    let receivers = Receivers::new().on(OutboxCategory::BenchUpdate, {
        let delivered = delivered.clone();
        let acknowledged = acknowledged.clone();
        let done = done.clone();
        move |message| {
            // Rows acknowledged, coalesced ones included.
            let rows = message.coalesced;
            if acknowledged.fetch_add(rows, Ordering::Relaxed) + rows == messages {
                done.notify_one();
            }
            delivered.fetch_add(1, Ordering::Relaxed);
            async { Ok::<_, HandlerError>(()) }
        }
    });
    let drainer = Drainer::builder(SeaOrmStore::new(db.clone()).unwrap(), receivers)
        .config(config)
        .build();
    let wal = wal_position(db).await;
    // It claims as soon as it starts.
    let started = Instant::now();
    let worker = outbox_core::worker::WorkerBuilder::new(drainer.clone())
        .kinds([OutboxKind::Region])
        .gauge_interval(None)
        .history_retention(None)
        .spawn();
    done.notified().await;
    // The last rounds' commits, counted in the time as the floor's last
    // delete is: the shutdown lets the rounds in flight finish.
    worker.shutdown().await;
    let elapsed = started.elapsed();
    let wal = drained_since(db, &drainer, &wal).await;
    (elapsed, delivered.load(Ordering::Relaxed), wal)
}

/// The median (sorts `values`).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Messages per second.
pub fn rate(messages: i64, elapsed: Duration) -> f64 {
    messages as f64 / elapsed.as_secs_f64()
}
