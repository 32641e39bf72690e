//! The partition ring's upkeep, on PostgreSQL: drained partitions emptied
//! with `TRUNCATE`, which does not wait for vacuum.
//!
//! Migration `m20261126_000015_outbox_partition_ring`, opted into with
//! `outbox_migrations::OutboxRingMigrator` (or
//! `migrations_with_partition_ring()` in a migrator of one's own), makes
//! each outbox table a ring of [`PARTITIONS`] partitions by id (`PARTITION BY LIST (((id
//! / 20000) % 3))`): ids `0..SPAN` go to `{table}_p0`, the next [`SPAN`] to
//! `_p1`, and so on around. Every delivered row is still a `DELETE`, and
//! while something holds the xmin horizon back (a long report, `pg_dump`, a
//! session left `idle in transaction`, a lagging replication slot) vacuum
//! can remove none of them: the table and its indexes would grow with every
//! delivery. [`truncate_drained`] empties each partition the sequence has
//! moved past once no row in it is pending, whatever the horizon, so the
//! outbox's size stays bounded by about two partitions' worth of rows.
//! `OutboxWorker` (outbox-axum) calls it every second when it starts on
//! tables that are the ring ([`is_partitioned`]).
//!
//! What keeps it safe:
//!
//! - it never empties the partition the sequence writes into now;
//! - it takes the partition's `ACCESS EXCLUSIVE` lock under a short
//!   `lock_timeout` ([`LOCK_TIMEOUT`]) and looks again once it holds it: a
//!   transaction that wrote into the partition and has not ended holds a
//!   lock that conflicts, so the partition is only emptied when every row
//!   written into it is committed (or rolled back) and none is visible;
//! - a partition that still holds a pending row (a shard backing off, paused
//!   or quarantined) is left as it is: the ring goes around it, and the
//!   sequence's new ids share it with the old rows. Order and delivery never
//!   depend on partitions (a shard's rows are read by id across all of
//!   them), only the size does.
//!
//! What can hold it up: a transaction that has read the outbox table and
//! not ended holds a lock on every partition, so the partitions are busy
//! until it ends; `pg_dump` of the outbox tables does so for the whole dump
//! (leave them out of dumps: their rows are transient). A transaction that
//! only holds the horizon back (a report on other tables, a session idle in
//! a transaction that touched other tables, a replication slot) does not.
//!
//! What it costs: while it waits for the lock (at most [`LOCK_TIMEOUT`]),
//! statements that read the whole table queue behind it; a truncation is
//! then a few milliseconds. At 2,000 writes a second a partition fills in
//! ten seconds, so that happens about every ten seconds. `TRUNCATE` is not
//! MVCC-safe: a `REPEATABLE READ` transaction that began before it and reads
//! the outbox afterwards finds the partition empty, where it would have
//! seen rows that were deleted after it began. No outbox statement reads
//! the table that way.
//!
//! ```no_run
//! # async fn run(db: sea_orm::DatabaseConnection) -> Result<(), sea_orm::DbErr> {
//! use outbox_core::OutboxKind;
//!
//! // What the worker does every second, for a drain of one's own:
//! for kind in OutboxKind::ALL {
//!     let report = outbox_seaorm::ring::truncate_drained(&db, kind).await?;
//!     println!("{kind:?}: truncated {:?}, busy {:?}", report.truncated, report.busy);
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use outbox_core::OutboxKind;
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbBackend, DbErr, IsolationLevel, Statement,
    TransactionTrait,
};

/// Ids per partition.
pub const SPAN: i64 = 20_000;

/// Partitions per outbox table.
pub const PARTITIONS: i64 = 3;

/// How long a truncation waits for a partition's lock before it leaves the
/// partition for the next try.
pub const LOCK_TIMEOUT: Duration = Duration::from_millis(100);

/// How often `OutboxWorker` empties drained partitions.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// The size in pages (8 KiB by default) from which the statistics of the
/// partition the sequence writes into are refreshed as it grows (see
/// [`truncate_drained`]): about a thousand rows.
pub const STATISTICS_FROM_PAGES: i64 = 16;

/// What one call of [`truncate_drained`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RingReport {
    /// Partitions emptied.
    pub truncated: Vec<String>,
    /// Drained partitions left for the next try: another transaction held
    /// a lock on them past [`LOCK_TIMEOUT`].
    pub busy: Vec<String>,
    /// The partition the sequence writes into, when its statistics were
    /// refreshed (see [`truncate_drained`]).
    pub analyzed: Vec<String>,
}

/// Whether the outbox tables of `db` are the partition ring (either of
/// them partitioned): `false` on SQLite and on the default plain tables.
///
/// # Errors
///
/// The database's, when the catalogue cannot be read.
pub async fn is_partitioned<C: ConnectionTrait>(db: &C) -> Result<bool, DbErr> {
    if db.get_database_backend() != DbBackend::Postgres {
        return Ok(false);
    }
    let row = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT EXISTS (SELECT 1 FROM pg_partitioned_table \
             WHERE partrelid IN (to_regclass('region_outbox'), to_regclass('control_outbox'))) \
             AS partitioned",
        ))
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("no row from pg_partitioned_table".to_owned()))?;
    row.try_get("", "partitioned")
}

/// The partition that id `id` of an outbox table goes to.
pub fn partition_of(kind: OutboxKind, id: i64) -> String {
    format!("{}_p{}", table(kind), (id / SPAN) % PARTITIONS)
}

fn table(kind: OutboxKind) -> &'static str {
    match kind {
        OutboxKind::Region => "region_outbox",
        OutboxKind::Control => "control_outbox",
    }
}

/// Empties with `TRUNCATE` every partition of `kind`'s outbox table that
/// the id sequence has moved past, that holds no visible row, and whose
/// files are not empty already (see the module's docs for why it is safe).
/// Does nothing on SQLite, or on a table that is not partitioned.
///
/// Also refreshes (`ANALYZE`) the statistics of the partition the sequence
/// writes into each time its files have doubled since they were last taken
/// (from [`STATISTICS_FROM_PAGES`] pages): a partition emptied by `TRUNCATE`
/// has none, and the plans PostgreSQL keeps for the drain's prepared
/// statements, made while it was empty, read it by a sequential scan, or
/// the due rows' index for a delete by id; kept while it fills with rows
/// (and, while vacuum's horizon is held back, with rows already
/// delivered), they read every row of it for each shard a claim reads or
/// each row a commit deletes: seconds per statement, until autovacuum
/// happened to analyze it. New statistics make PostgreSQL plan them again.
///
/// # Errors
///
/// The database's, when it cannot be read or a truncation fails for
/// another reason than a lock held past [`LOCK_TIMEOUT`] (that partition is
/// reported [`busy`](RingReport::busy)). A failure leaves every row where
/// it was.
pub async fn truncate_drained(
    db: &DatabaseConnection,
    kind: OutboxKind,
) -> Result<RingReport, DbErr> {
    truncate_drained_within(db, kind, LOCK_TIMEOUT).await
}

/// [`truncate_drained`], waiting up to `lock_timeout` for each partition's
/// lock.
///
/// # Errors
///
/// As [`truncate_drained`].
pub async fn truncate_drained_within(
    db: &DatabaseConnection,
    kind: OutboxKind,
    lock_timeout: Duration,
) -> Result<RingReport, DbErr> {
    let mut report = RingReport::default();
    if db.get_database_backend() != DbBackend::Postgres {
        return Ok(report);
    }
    let table = table(kind);
    // The partitions with files to empty, and whether each holds a row.
    let sql = format!(
        "SELECT c.relname::text AS partition,
                (SELECT last_value FROM pg_sequences
                 WHERE schemaname = n.nspname AND sequencename = '{table}_ids') AS last_id,
                (pg_relation_size(c.oid) / current_setting('block_size')::bigint) AS pages,
                c.relpages::bigint AS counted_pages
         FROM pg_inherits i
         JOIN pg_class c ON c.oid = i.inhrelid
         JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE i.inhparent = '{table}'::regclass"
    );
    let rows = db
        .query_all_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await?;
    for row in rows {
        let partition: String = row.try_get("", "partition")?;
        let last_id: Option<i64> = row.try_get("", "last_id")?;
        let pages: i64 = row.try_get("", "pages")?;
        if partition == partition_of(kind, last_id.unwrap_or(0)) {
            let counted: i64 = row.try_get("", "counted_pages")?;
            if pages >= STATISTICS_FROM_PAGES && pages >= counted.max(1) * 2 {
                match analyze(db, &partition, lock_timeout).await {
                    Ok(()) => report.analyzed.push(partition),
                    // Autovacuum holds it: its statistics come with it.
                    Err(error) if is_lock_timeout(&error) => {}
                    Err(error) => return Err(error),
                }
            }
            continue;
        }
        if pages == 0 {
            continue;
        }
        if !is_empty(db, &partition).await? {
            continue;
        }
        match truncate_if_empty(db, &partition, lock_timeout).await {
            Ok(true) => report.truncated.push(partition),
            Ok(false) => {}
            Err(error) if is_lock_timeout(&error) => report.busy.push(partition),
            Err(error) => return Err(error),
        }
    }
    for partition in &report.truncated {
        tracing::debug!(partition, "outbox partition emptied");
    }
    for partition in &report.analyzed {
        tracing::debug!(partition, "outbox partition's statistics refreshed");
    }
    let kind_label = kind.as_str();
    metrics::counter!(outbox_core::metrics::RING_TRUNCATED, "kind" => kind_label)
        .increment(report.truncated.len() as u64);
    metrics::counter!(outbox_core::metrics::RING_BUSY, "kind" => kind_label)
        .increment(report.busy.len() as u64);
    Ok(report)
}

async fn is_empty<C: ConnectionTrait>(db: &C, partition: &str) -> Result<bool, DbErr> {
    let row = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            format!("SELECT NOT EXISTS (SELECT 1 FROM {partition}) AS empty"),
        ))
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("no row from SELECT NOT EXISTS".to_owned()))?;
    row.try_get("", "empty")
}

/// Locks `partition`, looks again, truncates it when still empty.
async fn truncate_if_empty(
    db: &DatabaseConnection,
    partition: &str,
    lock_timeout: Duration,
) -> Result<bool, DbErr> {
    // READ COMMITTED whatever the role's default: the look under the lock
    // must take its snapshot after the lock is held.
    let txn = db
        .begin_with_config(Some(IsolationLevel::ReadCommitted), None)
        .await?;
    txn.execute_unprepared(&format!(
        "SET LOCAL lock_timeout = '{}ms'",
        lock_timeout.as_millis().max(1)
    ))
    .await?;
    txn.execute_unprepared(&format!("LOCK TABLE {partition} IN ACCESS EXCLUSIVE MODE"))
        .await?;
    // A new snapshot, taken under the lock: every transaction that wrote
    // into the partition has ended, and what it committed is seen here.
    if !is_empty(&txn, partition).await? {
        txn.rollback().await?;
        return Ok(false);
    }
    txn.execute_unprepared(&format!("TRUNCATE {partition}"))
        .await?;
    txn.commit().await?;
    Ok(true)
}

/// Refreshes `partition`'s statistics, waiting at most `lock_timeout` for
/// the lock `ANALYZE` takes (which only autovacuum and other `ANALYZE`s
/// hold against it).
async fn analyze(
    db: &DatabaseConnection,
    partition: &str,
    lock_timeout: Duration,
) -> Result<(), DbErr> {
    let txn = db.begin().await?;
    txn.execute_unprepared(&format!(
        "SET LOCAL lock_timeout = '{}ms'",
        lock_timeout.as_millis().max(1)
    ))
    .await?;
    txn.execute_unprepared(&format!("ANALYZE {partition}"))
        .await?;
    txn.commit().await
}

/// PostgreSQL's `lock_not_available` (55P03): the lock timeout ran out.
fn is_lock_timeout(error: &DbErr) -> bool {
    crate::store::codec::sqlstate(error).as_deref() == Some("55P03")
}
