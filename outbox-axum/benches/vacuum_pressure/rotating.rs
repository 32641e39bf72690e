//! The storage prototype of issue 27 item 2: an outbox table partitioned
//! into a ring of three by id range, `PARTITION BY LIST ((id / SPAN) % 3)`,
//! whose partitions are emptied with `TRUNCATE` once every row in them is
//! delivered, instead of waiting for vacuum. `TRUNCATE` removes dead rows
//! whatever the xmin horizon, so a pinned horizon no longer grows the
//! table without bound. The same floor loop drains it as the plain table.
//!
//! The rotator, every second, for each partition other than the one the
//! sequence writes into: if the partition has rows on disk and none
//! visible, in one transaction with a short `lock_timeout`: `LOCK TABLE …
//! IN ACCESS EXCLUSIVE MODE`, look again (a fresh snapshot: a row a
//! writer committed while the lock was awaited is seen), and `TRUNCATE`
//! only if still empty. A writer holding the lock (an open transaction
//! that wrote into it) makes the lock wait and time out: nothing is lost,
//! the partition is tried again a second later.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection, Statement, TransactionTrait};

use super::{stmt, Log, Sample};

/// Ids per partition: at about 1,000 writes/s, a partition is written for
/// 20 s and the ring turns in a minute.
pub const SPAN: i64 = 20_000;

const PARTITIONS: i64 = 3;

/// Creates the table and its partitions, and the floor's plain table (once
/// per database).
pub async fn create(db: &DatabaseConnection) {
    let mut sql = format!(
        "CREATE SEQUENCE rotating_outbox_id_seq;
         CREATE TABLE rotating_outbox (
             id bigint NOT NULL DEFAULT nextval('rotating_outbox_id_seq'),
             shard_scope integer NOT NULL,
             shard_identifier bigint NOT NULL,
             object_identifier bigint NOT NULL,
             payload jsonb,
             scheduled_for timestamptz NOT NULL,
             date_added timestamptz NOT NULL DEFAULT now()
         ) PARTITION BY LIST (((id / {SPAN}) % {PARTITIONS}));"
    );
    for p in 0..PARTITIONS {
        sql.push_str(&format!(
            "CREATE TABLE rotating_outbox_p{p} PARTITION OF rotating_outbox FOR VALUES IN ({p})
             WITH (autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0.01);"
        ));
    }
    sql.push_str(
        "CREATE INDEX ON rotating_outbox (id);
         CREATE INDEX ON rotating_outbox (scheduled_for, id);
         CREATE INDEX ON rotating_outbox (shard_scope, shard_identifier, id);",
    );
    // The plain table of the floor's baseline: the same columns and
    // indexes, not partitioned, its rows left to vacuum.
    sql.push_str(
        "CREATE TABLE plain_outbox (
             id bigserial PRIMARY KEY,
             shard_scope integer NOT NULL,
             shard_identifier bigint NOT NULL,
             object_identifier bigint NOT NULL,
             payload jsonb,
             scheduled_for timestamptz NOT NULL,
             date_added timestamptz NOT NULL DEFAULT now()
         ) WITH (autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0.01);
         CREATE INDEX ON plain_outbox (scheduled_for, id);
         CREATE INDEX ON plain_outbox (shard_scope, shard_identifier, id);",
    );
    db.execute_unprepared(&sql).await.unwrap();
}

/// One write: a model row and a row of `table` (`rotating_outbox` or
/// `plain_outbox`).
pub async fn write(writer: &DatabaseConnection, table: &str, n: i64, shards: i64, log: &Log) {
    let txn = writer.begin().await.unwrap();
    txn.execute_raw(Statement::from_sql_and_values(
        txn.get_database_backend(),
        "INSERT INTO widgets (organization_id, name) VALUES ($1, $2)",
        [(n % shards).into(), format!("w{n}").into()],
    ))
    .await
    .unwrap();
    let row = txn
        .query_one_raw(Statement::from_sql_and_values(
            txn.get_database_backend(),
            format!(
                "INSERT INTO {table} (shard_scope, shard_identifier, object_identifier, \
                 scheduled_for) VALUES (0, $1, $2, '2016-08-01') RETURNING id"
            ),
            [(n % shards).into(), n.into()],
        ))
        .await
        .unwrap()
        .unwrap();
    let id: i64 = row.try_get("", "id").unwrap();
    log.commits
        .lock()
        .unwrap()
        .insert(id, std::time::Instant::now());
    txn.commit().await.unwrap();
    log.written.fetch_add(1, Ordering::Relaxed);
}

/// Sizes and dead tuples of `parent`'s partitions, summed (of `parent`
/// itself when it is a plain table).
pub async fn sample(db: &DatabaseConnection, parent: &str) -> Sample {
    let row = db
        .query_one_raw(stmt(&format!(
            "SELECT COALESCE(sum(s.n_dead_tup), 0)::bigint AS dead,
                    COALESCE(sum(pg_relation_size(c.oid)), 0)::bigint AS table_bytes,
                    COALESCE(sum(pg_indexes_size(c.oid)), 0)::bigint AS index_bytes,
                    pg_total_relation_size('outbox_claim_bucket') AS bucket_bytes
             FROM pg_class c
             LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
             WHERE c.relkind = 'r' AND (c.oid = '{parent}'::regclass OR c.oid IN (
                 SELECT inhrelid FROM pg_inherits WHERE inhparent = '{parent}'::regclass))"
        )))
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

/// What the rotator did.
#[derive(Default)]
pub struct Rotations {
    pub truncated: AtomicU64,
    pub lock_timeouts: AtomicU64,
}

/// Empties drained partitions until `stop`.
pub async fn rotator(db: DatabaseConnection, rotations: Arc<Rotations>, stop: Arc<AtomicBool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let last: i64 = db
            .query_one_raw(stmt("SELECT last_value FROM rotating_outbox_id_seq"))
            .await
            .unwrap()
            .unwrap()
            .try_get("", "last_value")
            .unwrap();
        let current = (last / SPAN) % PARTITIONS;
        for p in (0..PARTITIONS).filter(|&p| p != current) {
            let table = format!("rotating_outbox_p{p}");
            let row = db
                .query_one_raw(stmt(&format!(
                    "SELECT pg_relation_size('{table}') > 0 AS on_disk,
                            NOT EXISTS (SELECT 1 FROM {table}) AS empty"
                )))
                .await
                .unwrap()
                .unwrap();
            let on_disk: bool = row.try_get("", "on_disk").unwrap();
            let empty: bool = row.try_get("", "empty").unwrap();
            if !(on_disk && empty) {
                continue;
            }
            let txn = db.begin().await.unwrap();
            txn.execute_unprepared("SET LOCAL lock_timeout = '100ms'")
                .await
                .unwrap();
            if txn
                .execute_unprepared(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
                .await
                .is_err()
            {
                txn.rollback().await.ok();
                rotations.lock_timeouts.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let still_empty: bool = txn
                .query_one_raw(stmt(&format!(
                    "SELECT NOT EXISTS (SELECT 1 FROM {table}) AS empty"
                )))
                .await
                .unwrap()
                .unwrap()
                .try_get("", "empty")
                .unwrap();
            if still_empty {
                txn.execute_unprepared(&format!("TRUNCATE {table}"))
                    .await
                    .unwrap();
                rotations.truncated.fetch_add(1, Ordering::Relaxed);
            }
            txn.commit().await.unwrap();
        }
    }
}
