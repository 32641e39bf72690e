//! SQLite: the same contract under SQLite's single writer.
//!
//! SQLite runs in-process, so per-shard statements cost microseconds; the
//! commit takes the write lock up front (`BEGIN IMMEDIATE`) so that it never
//! fails half-way on a lock upgrade. `FOR UPDATE SKIP LOCKED` does not exist
//! here: claims are rows with a lease, written by one writer at a time.

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Value};

use outbox_core::{CommitBatch, OutboxKind, ShardEnd, ShardRead, StoreError, StoredRow};

use super::{db_error, fence, row_from_result, split_owned, statement, Queries};
use super::{delete_delivered, finish_round};

const BACKEND: DbBackend = DbBackend::Sqlite;

/// Reads a batch of rows of each shard, one cheap statement per shard.
pub(crate) async fn read_rows<Db: ConnectionTrait>(
    db: &Db,
    queries: &Queries,
    shards: &[ShardRead],
    limit: usize,
) -> Result<Vec<StoredRow>, StoreError> {
    let mut out = Vec::new();
    for read in shards {
        let mut values = vec![
            Value::from(read.shard.scope()),
            Value::from(read.shard.identifier()),
            Value::from(read.up_to_id.unwrap_or(i64::MAX)),
            Value::from(limit.min(i64::MAX as usize) as i64),
        ];
        if queries.kind == OutboxKind::Control {
            values.push(Value::from(
                read.shard.region_name().unwrap_or("").to_owned(),
            ));
        }
        let rows = db
            .query_all_raw(statement(BACKEND, &queries.read_rows, values))
            .await
            .map_err(db_error("read outbox rows"))?;
        for row in &rows {
            out.push(row_from_result(row, BACKEND, read.shard.clone())?);
        }
    }
    Ok(out)
}

/// Applies a round in one `BEGIN IMMEDIATE` transaction, fenced by the token.
pub(crate) async fn commit(
    db: &DatabaseConnection,
    queries: &Queries,
    batch: &CommitBatch,
) -> Result<outbox_core::CommitOutcome, StoreError> {
    let txn = crate::begin_write(db)
        .await
        .map_err(db_error("begin a commit"))?;
    let owned = fence(&txn, BACKEND, queries, batch).await?;
    let (mut outcome, owned_shards) = split_owned(batch, &owned);

    outcome.deleted += delete_delivered(&txn, BACKEND, queries, batch, &owned_shards).await?;

    let released = owned_shards
        .iter()
        .filter(|s| s.end == ShardEnd::Release)
        .count();
    if released > 0 && released == owned.len() {
        txn.execute_raw(statement(
            BACKEND,
            &queries.release_all,
            vec![Value::from(batch.kind.as_i16()), Value::from(batch.token)],
        ))
        .await
        .map_err(db_error("release claims"))?;
    } else {
        for shard in owned_shards.iter().filter(|s| s.end == ShardEnd::Release) {
            txn.execute_raw(statement(
                BACKEND,
                &queries.release_some,
                vec![
                    Value::from(batch.kind.as_i16()),
                    Value::from(batch.token),
                    Value::from(shard.shard.region_name().unwrap_or("").to_owned()),
                    Value::from(shard.shard.scope()),
                    Value::from(shard.shard.identifier()),
                ],
            ))
            .await
            .map_err(db_error("release claims"))?;
        }
    }
    finish_round(txn, BACKEND, queries, batch, &owned_shards, outcome).await
}
