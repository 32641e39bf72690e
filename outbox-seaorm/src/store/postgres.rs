//! PostgreSQL: one statement per step for a whole batch of shards.
//!
//! Claims, reads and commits each cover every shard of a round: claims with
//! one `INSERT … ON CONFLICT DO UPDATE … WHERE lease expired`, reads with
//! `unnest` + `LATERAL`, deletes with `id = ANY($1)` in bounded chunks. The
//! claim table is `UNLOGGED`, so claiming writes no WAL.

use std::collections::HashSet;

use sea_orm::{ConnectionTrait, DbBackend, TransactionTrait, Value};

use outbox_core::{
    CommitBatch, CommitOutcome, ShardCommit, ShardEnd, ShardKey, ShardRead, StoreError, StoredRow,
};

use super::{db_error, fence, row_from_result, split_owned, statement, Queries};
use super::{delete_delivered, finish_round};
use crate::time;

const BACKEND: DbBackend = DbBackend::Postgres;

/// Shard keys as three parallel arrays (regions, scopes, identifiers), for
/// `unnest`.
fn key_arrays<'a>(shards: impl Iterator<Item = &'a ShardKey>) -> [Value; 3] {
    let mut regions = Vec::new();
    let mut scopes = Vec::new();
    let mut identifiers = Vec::new();
    for shard in shards {
        regions.push(shard.region_name().unwrap_or("").to_owned());
        scopes.push(shard.scope());
        identifiers.push(shard.identifier());
    }
    [
        Value::from(regions),
        Value::from(scopes),
        Value::from(identifiers),
    ]
}

/// Reads a batch of rows of every shard in one query.
pub(crate) async fn read_rows<Db: ConnectionTrait>(
    db: &Db,
    queries: &Queries,
    shards: &[ShardRead],
    limit: usize,
) -> Result<Vec<StoredRow>, StoreError> {
    if shards.is_empty() {
        return Ok(Vec::new());
    }
    let [regions, scopes, identifiers] = key_arrays(shards.iter().map(|s| &s.shard));
    let up_to: Vec<i64> = shards
        .iter()
        .map(|s| s.up_to_id.unwrap_or(i64::MAX))
        .collect();
    let values = vec![
        regions,
        scopes,
        identifiers,
        Value::from(up_to),
        Value::from(limit.min(i64::MAX as usize) as i64),
    ];
    let rows = db
        .query_all_raw(statement(BACKEND, &queries.read_rows, values))
        .await
        .map_err(db_error("read outbox rows"))?;
    rows.iter()
        .map(|row| {
            let op = db_error("read outbox rows");
            let region: String = row.try_get("", "region_name").map_err(&op)?;
            let scope: i32 = row.try_get("", "shard_scope").map_err(&op)?;
            let identifier: i64 = row.try_get("", "shard_identifier").map_err(&op)?;
            let shard = ShardKey::from_raw(queries.kind, scope, identifier, Some(region));
            row_from_result(row, BACKEND, shard)
        })
        .collect()
}

/// Applies a round atomically, fenced by the claim token: in one statement
/// when every shard of the round ends and its ids fit one delete chunk (the
/// common case), else in one transaction.
pub(crate) async fn commit<Db: TransactionTrait + ConnectionTrait>(
    db: &Db,
    queries: &Queries,
    batch: &CommitBatch,
) -> Result<CommitOutcome, StoreError> {
    let ids: usize = batch.shards.iter().map(|s| s.delete_ids.len()).sum();
    if ids <= batch.delete_chunk
        && batch
            .shards
            .iter()
            .all(|s| s.end == ShardEnd::Release && s.dead_letters.is_empty())
    {
        return commit_finished_round(db, queries, batch).await;
    }
    let txn = db.begin().await.map_err(db_error("begin a commit"))?;
    // Deletes need not be durable: one lost in a crash is a delivery made
    // again (at least once). This transaction only; no fsync wait.
    txn.execute_unprepared("SET LOCAL synchronous_commit = off")
        .await
        .map_err(db_error("begin a commit"))?;
    let owned = fence(&txn, BACKEND, queries, batch).await?;
    let (mut outcome, owned_shards) = split_owned(batch, &owned);

    outcome.deleted += delete_delivered(&txn, BACKEND, queries, batch, &owned_shards).await?;

    let released: Vec<&ShardCommit> = owned_shards
        .iter()
        .copied()
        .filter(|s| s.end == ShardEnd::Release)
        .collect();
    if !released.is_empty() {
        // By their keys: exactly the rows the fence locked, so this takes no
        // new lock (and cannot join a deadlock with a racing claim).
        let [regions, scopes, identifiers] = key_arrays(released.iter().map(|s| &s.shard));
        let values = vec![
            Value::from(batch.kind.as_i16()),
            Value::from(batch.token),
            regions,
            scopes,
            identifiers,
        ];
        txn.execute_raw(statement(BACKEND, &queries.release_some, values))
            .await
            .map_err(db_error("release claims"))?;
    }

    finish_round(txn, BACKEND, queries, batch, &owned_shards, outcome).await
}

async fn commit_finished_round<Db: ConnectionTrait>(
    db: &Db,
    queries: &Queries,
    batch: &CommitBatch,
) -> Result<CommitOutcome, StoreError> {
    let ids: Vec<i64> = batch
        .shards
        .iter()
        .flat_map(|s| s.delete_ids.iter().copied())
        .collect();
    let rows = db
        .query_all_raw(statement(
            BACKEND,
            &queries.release_all_and_delete,
            vec![
                Value::from(batch.kind.as_i16()),
                Value::from(batch.token),
                time::bind(BACKEND, batch.now),
                Value::from(ids),
            ],
        ))
        .await
        .map_err(db_error("commit a drain round"))?;
    let mut owned = HashSet::with_capacity(rows.len());
    let mut deleted = 0;
    for row in &rows {
        let op = db_error("commit a drain round");
        let region: String = row.try_get("", "region_name").map_err(&op)?;
        let scope: i32 = row.try_get("", "shard_scope").map_err(&op)?;
        let identifier: i64 = row.try_get("", "shard_identifier").map_err(&op)?;
        deleted = row.try_get::<i64>("", "deleted").map_err(&op)?;
        owned.insert(ShardKey::from_raw(
            batch.kind,
            scope,
            identifier,
            Some(region),
        ));
    }
    let (mut outcome, _) = split_owned(batch, &owned);
    outcome.deleted = deleted.max(0) as u64;
    Ok(outcome)
}
