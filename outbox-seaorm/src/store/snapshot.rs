//! The admin snapshot: counts and lists read in one transaction, the same
//! way on PostgreSQL (repeatable read, read only) and SQLite (one read
//! transaction, one WAL snapshot).

use sea_orm::{
    AccessMode, ConnectionTrait, DatabaseConnection, DbBackend, IsolationLevel, Statement,
    TransactionTrait, Value,
};

use outbox_core::store::{AdminSnapshot, ScopeDepth, ShardDepth};
use outbox_core::{OutboxKind, StoreError};

use super::codec::{self, get, op};
use crate::time;

/// The statements of one table.
pub(super) struct SnapshotSql {
    /// `n`, no parameters.
    pub(super) pending_count: &'static str,
    /// `$1` limit.
    pub(super) shard_depths: &'static str,
    /// `$1` kind, `$2` limit.
    pub(super) failing_shards: &'static str,
}

const DEAD_LETTER_COUNT: &str = "SELECT count(*) AS n FROM outbox_dead_letter WHERE kind = $1";

const OP: &str = "read an admin snapshot";

/// Decodes `shard_depths.sql` rows.
pub(super) fn shard_depths(
    rows: &[sea_orm::QueryResult],
    kind: OutboxKind,
    backend: DbBackend,
) -> Result<Vec<ShardDepth>, StoreError> {
    rows.iter()
        .map(|row| {
            let depth: i64 = get(row, "depth", "measure shard depths")?;
            Ok(ShardDepth {
                shard: codec::shard(row, kind)?,
                depth: u64::try_from(depth).unwrap_or(0),
                oldest_date_added: time::get(row, backend, "oldest_date_added")?,
                next_scheduled_for: time::get(row, backend, "next_scheduled_for")?,
            })
        })
        .collect()
}

async fn count<C: ConnectionTrait>(
    txn: &C,
    sql: &str,
    values: Vec<Value>,
) -> Result<u64, StoreError> {
    let backend = txn.get_database_backend();
    let row = txn
        .query_one_raw(Statement::from_sql_and_values(backend, sql, values))
        .await
        .map_err(op(OP))?;
    let n: i64 = match row {
        Some(row) => get(&row, "n", OP)?,
        None => 0,
    };
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Reads the snapshot of `kind` in one transaction of its own: repeatable
/// read and read only on PostgreSQL; on SQLite a read transaction (one WAL
/// snapshot from its first read on).
pub(super) async fn read(
    db: &DatabaseConnection,
    sql: &SnapshotSql,
    kind: OutboxKind,
    limit: usize,
) -> Result<AdminSnapshot, StoreError> {
    let txn = match db.get_database_backend() {
        DbBackend::Postgres => {
            db.begin_with_config(
                Some(IsolationLevel::RepeatableRead),
                Some(AccessMode::ReadOnly),
            )
            .await
        }
        _ => db.begin().await,
    }
    .map_err(op(OP))?;
    let snapshot = read_in(&txn, sql, kind, limit).await?;
    txn.commit().await.map_err(op(OP))?;
    Ok(snapshot)
}

async fn read_in<C: ConnectionTrait>(
    txn: &C,
    sql: &SnapshotSql,
    kind: OutboxKind,
    limit: usize,
) -> Result<AdminSnapshot, StoreError> {
    let backend = txn.get_database_backend();
    let all = |text: &'static str, values: Vec<Value>| {
        txn.query_all_raw(Statement::from_sql_and_values(backend, text, values))
    };
    let pending = count(txn, sql.pending_count, vec![]).await?;
    let depths = all(sql.shard_depths, vec![codec::limit(limit).into()])
        .await
        .map_err(op(OP))?;
    let failing = all(
        sql.failing_shards,
        vec![kind.as_i16().into(), codec::limit(limit).into()],
    )
    .await
    .map_err(op(OP))?;
    let dead_letters = count(txn, DEAD_LETTER_COUNT, vec![kind.as_i16().into()]).await?;
    Ok(AdminSnapshot {
        kind,
        pending,
        deepest: shard_depths(&depths, kind, backend)?,
        failing: codec::failing_shards(&failing, kind, backend)?,
        dead_letters,
    })
}

/// Per scope of `kind`: pending rows and the oldest's `date_added` (one
/// `GROUP BY`, the same SQL on both backends).
pub(super) async fn scope_depths(
    db: &DatabaseConnection,
    kind: OutboxKind,
) -> Result<Vec<ScopeDepth>, StoreError> {
    const OP: &str = "measure scope depths";
    let sql = match kind {
        OutboxKind::Region => {
            "SELECT shard_scope, count(*) AS depth, min(date_added) AS oldest_date_added \
             FROM region_outbox GROUP BY shard_scope ORDER BY shard_scope"
        }
        OutboxKind::Control => {
            "SELECT shard_scope, count(*) AS depth, min(date_added) AS oldest_date_added \
             FROM control_outbox GROUP BY shard_scope ORDER BY shard_scope"
        }
    };
    let backend = db.get_database_backend();
    let rows = db
        .query_all_raw(Statement::from_string(backend, sql))
        .await
        .map_err(op(OP))?;
    rows.iter()
        .map(|row| {
            let depth: i64 = get(row, "depth", OP)?;
            Ok(ScopeDepth {
                scope: get(row, "shard_scope", OP)?,
                depth: u64::try_from(depth).unwrap_or(0),
                oldest_date_added: time::get(row, backend, "oldest_date_added")?,
            })
        })
        .collect()
}

/// The dead letters of `kind`.
pub(super) async fn dead_letter_count(
    db: &DatabaseConnection,
    kind: OutboxKind,
) -> Result<u64, StoreError> {
    count(db, DEAD_LETTER_COUNT, vec![kind.as_i16().into()]).await
}
