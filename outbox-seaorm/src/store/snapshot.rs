//! The admin snapshot: counts and lists read in one transaction, the same
//! way on PostgreSQL (repeatable read, read only) and SQLite (one read
//! transaction, one WAL snapshot).

use sea_orm::{
    AccessMode, ConnectionTrait, DatabaseConnection, DbBackend, IsolationLevel, Statement,
    TransactionTrait, Value,
};

use outbox_core::store::{AdminSnapshot, Count, ScopeDepth, ShardDepth};
use outbox_core::{OutboxKind, StoreError};

use super::codec::{self, get, op};
use crate::time;

/// The statements of one table.
pub(super) enum SnapshotSql {
    /// Statements that stop at the cap (PostgreSQL).
    Capped {
        /// `n` (at most `$1 + 1`) and `estimate` (nullable); `$1` cap.
        pending: &'static str,
        /// `$1` limit, `$2` cap, `$3` rows counted per shard (up to `$3 +
        /// 1`), with the planner's `estimate` of each shard's rows.
        shard_depths: &'static str,
        /// `$1` kind, `$2` limit.
        failing_shards: &'static str,
    },
    /// Statements that count every row, capped afterwards (SQLite: the
    /// simplest reads, on a store that serves one process).
    Exact {
        /// `n`, no parameters.
        pending_count: &'static str,
        /// `$1` limit.
        shard_depths: &'static str,
        /// `$1` kind, `$2` limit.
        failing_shards: &'static str,
    },
}

const DEAD_LETTER_COUNT: &str = "SELECT count(*) AS n FROM outbox_dead_letter WHERE kind = $1";
const DEAD_LETTER_COUNT_CAPPED: &str =
    "SELECT count(*) AS n FROM (SELECT 1 FROM outbox_dead_letter WHERE kind = $1 LIMIT $2 + 1) d";

/// How many rows of each listed shard the capped snapshot counts at most
/// (or the cap, if lower): the listed shards' rows are scattered over the
/// table, so each costs a page read; a deeper shard shows the planner's
/// estimate (or "at least" this many).
pub(super) const SHARD_ROWS_COUNTED: u64 = 10;

/// The cap as the statements take it (`$cap + 1` must fit a bigint).
pub(super) fn cap_param(cap: u64) -> i64 {
    i64::try_from(cap).unwrap_or(i64::MAX).min(i64::MAX - 1)
}

/// `counted` rows of a read that stopped after `cap + 1`, with the
/// planner's `estimate` of them all: exact up to the cap, above it the
/// estimate when it says more than the cap, else at least the cap.
pub(super) fn capped(counted: i64, estimate: Option<i64>, cap: u64) -> Count {
    let counted = u64::try_from(counted).unwrap_or(0);
    if counted <= cap {
        return Count::Exact(counted);
    }
    match estimate.and_then(|n| u64::try_from(n).ok()) {
        Some(estimate) if estimate > cap => Count::Estimated(estimate),
        _ => Count::AtLeast(cap),
    }
}

const OP: &str = "read an admin snapshot";

/// How a shard's depth was counted.
#[derive(Clone, Copy)]
pub(super) enum DepthCount {
    /// Every row (`shard_depths.sql`).
    Exact,
    /// Every row, then capped.
    UpTo(u64),
    /// Up to this many + 1, with the planner's `estimate`
    /// (`deepest_shards.sql`).
    Estimated(u64),
}

/// Decodes `shard_depths.sql` and `deepest_shards.sql` rows.
pub(super) fn shard_depths(
    rows: &[sea_orm::QueryResult],
    kind: OutboxKind,
    backend: DbBackend,
    count: DepthCount,
) -> Result<Vec<ShardDepth>, StoreError> {
    const OP: &str = "measure shard depths";
    rows.iter()
        .map(|row| {
            let counted: i64 = get(row, "depth", OP)?;
            let depth = match count {
                DepthCount::Exact => Count::Exact(u64::try_from(counted).unwrap_or(0)),
                DepthCount::UpTo(cap) => Count::up_to(u64::try_from(counted).unwrap_or(0), cap),
                DepthCount::Estimated(cap) => capped(counted, get(row, "estimate", OP)?, cap),
            };
            Ok(ShardDepth {
                shard: codec::shard(row, kind)?,
                depth,
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
    cap: u64,
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
    let snapshot = read_in(&txn, sql, kind, limit, cap).await?;
    txn.commit().await.map_err(op(OP))?;
    Ok(snapshot)
}

async fn read_in<C: ConnectionTrait>(
    txn: &C,
    sql: &SnapshotSql,
    kind: OutboxKind,
    limit: usize,
    cap: u64,
) -> Result<AdminSnapshot, StoreError> {
    let backend = txn.get_database_backend();
    let all = |text: &'static str, values: Vec<Value>| {
        txn.query_all_raw(Statement::from_sql_and_values(backend, text, values))
    };
    let (pending, depths, failing_shards, depth_count) = match *sql {
        SnapshotSql::Capped {
            pending,
            shard_depths,
            failing_shards,
        } => {
            let row = txn
                .query_one_raw(Statement::from_sql_and_values(
                    backend,
                    pending,
                    [cap_param(cap).into()],
                ))
                .await
                .map_err(op(OP))?;
            let pending = match row {
                Some(row) => capped(get(&row, "n", OP)?, get(&row, "estimate", OP)?, cap),
                None => Count::Exact(0),
            };
            let per_shard = cap.min(SHARD_ROWS_COUNTED);
            let depths = all(
                shard_depths,
                vec![
                    codec::limit(limit).into(),
                    cap_param(cap).into(),
                    cap_param(per_shard).into(),
                ],
            )
            .await
            .map_err(op(OP))?;
            (
                pending,
                depths,
                failing_shards,
                DepthCount::Estimated(per_shard),
            )
        }
        SnapshotSql::Exact {
            pending_count,
            shard_depths,
            failing_shards,
        } => {
            let pending = Count::up_to(count(txn, pending_count, vec![]).await?, cap);
            let depths = all(shard_depths, vec![codec::limit(limit).into()])
                .await
                .map_err(op(OP))?;
            (pending, depths, failing_shards, DepthCount::UpTo(cap))
        }
    };
    let failing = all(
        failing_shards,
        vec![kind.as_i16().into(), codec::limit(limit).into()],
    )
    .await
    .map_err(op(OP))?;
    let dead_letters = count(
        txn,
        DEAD_LETTER_COUNT_CAPPED,
        vec![kind.as_i16().into(), cap_param(cap).into()],
    )
    .await?;
    Ok(AdminSnapshot {
        kind,
        pending,
        deepest: shard_depths(&depths, kind, backend, depth_count)?,
        failing: codec::failing_shards(&failing, kind, backend)?,
        dead_letters: Count::up_to(dead_letters, cap),
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
                depth: Count::Exact(u64::try_from(depth).unwrap_or(0)),
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
