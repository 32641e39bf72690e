//! PostgreSQL: one statement per step for a whole batch of shards.
//!
//! Claims, reads and commits each cover every shard of a round: claims with
//! one `INSERT … ON CONFLICT DO UPDATE … WHERE lease expired`, reads with
//! `unnest` + `LATERAL`, deletes with `id = ANY($1)` in bounded chunks. The
//! claim table is `UNLOGGED`, so claiming writes no WAL.

use std::collections::HashSet;

use sea_orm::{ConnectionTrait, DbBackend, TransactionSession, TransactionTrait, Value};

use outbox_core::{
    ClaimRequest, CommitBatch, CommitOutcome, OutboxKind, ShardClaim, ShardCommit, ShardEnd,
    ShardKey, ShardRead, StoreError, StoredRow,
};

use super::{claim_from_row, common_queries, db_error, render, statement, Queries};
use crate::time;

const BACKEND: DbBackend = DbBackend::Postgres;

/// Renders the statements of `kind`.
pub(crate) fn queries(kind: OutboxKind) -> Queries {
    let r = |template: &str| render(template, kind, "''::text");
    let [pending_count, oldest_pending, max_id] = common_queries(kind);
    Queries {
        kind,
        claim_due: r(include_str!("queries/postgres/claim_due.sql")),
        claim_shard: r(include_str!("queries/postgres/claim_shard.sql")),
        read_rows: r(include_str!("queries/postgres/read_rows.sql")),
        fence: r(include_str!("queries/postgres/fence.sql")),
        delete_rows: r(include_str!("queries/postgres/delete_rows.sql")),
        release_all: r(include_str!("queries/postgres/release_all.sql")),
        release_some: r(include_str!("queries/postgres/release_some.sql")),
        release_all_and_delete: r(include_str!("queries/postgres/release_all_and_delete.sql")),
        backoff_claim: r(include_str!("queries/postgres/backoff_claim.sql")),
        backoff_rows: r(include_str!("queries/postgres/backoff_rows.sql")),
        shard_depths: r(include_str!("queries/postgres/shard_depths.sql")),
        has_due: r(include_str!("queries/postgres/has_due.sql")),
        pending_count,
        oldest_pending,
        max_id,
    }
}

/// Claims due shards in one statement.
pub(crate) async fn claim_due<Db: ConnectionTrait>(
    db: &Db,
    queries: &Queries,
    request: &ClaimRequest,
) -> Result<Vec<ShardClaim>, StoreError> {
    let values = claim_due_values(BACKEND, request);
    let rows = match db
        .query_all_raw(statement(BACKEND, &queries.claim_due, values))
        .await
    {
        Ok(rows) => rows,
        // Two claimers that locked shards in different orders: one is chosen
        // as the deadlock victim. It simply claims nothing this round.
        Err(error) if error.to_string().contains("deadlock detected") => return Ok(Vec::new()),
        Err(error) => return Err(StoreError::database("claim due shards", error)),
    };
    claims_from_rows(&rows, request)
}

pub(crate) fn claim_due_values(backend: DbBackend, request: &ClaimRequest) -> Vec<Value> {
    vec![
        time::bind(backend, request.now),
        Value::from(request.up_to_id.unwrap_or(i64::MAX)),
        Value::from(request.kind.as_i16()),
        Value::from(request.limit.min(i64::MAX as usize) as i64),
        Value::from(request.token),
        Value::from(request.owner.clone()),
        time::bind(backend, request.lease_until),
        Value::from(
            request
                .limit
                .saturating_mul(CANDIDATE_ROWS_PER_SHARD)
                .min(i64::MAX as usize) as i64,
        ),
    ]
}

/// Due rows scanned per shard asked for when looking for claimable shards.
const CANDIDATE_ROWS_PER_SHARD: usize = 4;

pub(crate) fn claims_from_rows(
    rows: &[sea_orm::QueryResult],
    request: &ClaimRequest,
) -> Result<Vec<ShardClaim>, StoreError> {
    rows.iter()
        .map(|row| {
            let op = db_error("read a claim");
            let region: String = row.try_get("", "region_name").map_err(&op)?;
            let scope: i32 = row.try_get("", "shard_scope").map_err(&op)?;
            let identifier: i64 = row.try_get("", "shard_identifier").map_err(&op)?;
            let shard = ShardKey::from_raw(request.kind, scope, identifier, Some(region));
            claim_from_row(row, shard, request)
        })
        .collect()
}

/// Claims one shard if nobody live holds it.
pub(crate) async fn claim_shard<Db: ConnectionTrait>(
    db: &Db,
    queries: &Queries,
    request: &ClaimRequest,
    shard: &ShardKey,
) -> Result<Option<ShardClaim>, StoreError> {
    let values = claim_shard_values(BACKEND, request, shard);
    let row = db
        .query_one_raw(statement(BACKEND, &queries.claim_shard, values))
        .await
        .map_err(db_error("claim a shard"))?;
    row.map(|row| claim_from_row(&row, shard.clone(), request))
        .transpose()
}

pub(crate) fn claim_shard_values(
    backend: DbBackend,
    request: &ClaimRequest,
    shard: &ShardKey,
) -> Vec<Value> {
    vec![
        Value::from(request.kind.as_i16()),
        Value::from(shard.region_name().unwrap_or("").to_owned()),
        Value::from(shard.scope()),
        Value::from(shard.identifier()),
        Value::from(request.token),
        Value::from(request.owner.clone()),
        time::bind(backend, request.lease_until),
        time::bind(backend, request.now),
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
    let regions: Vec<String> = shards
        .iter()
        .map(|s| s.shard.region_name().unwrap_or("").to_owned())
        .collect();
    let scopes: Vec<i32> = shards.iter().map(|s| s.shard.scope()).collect();
    let identifiers: Vec<i64> = shards.iter().map(|s| s.shard.identifier()).collect();
    let up_to: Vec<i64> = shards
        .iter()
        .map(|s| s.up_to_id.unwrap_or(i64::MAX))
        .collect();
    let values = vec![
        Value::from(regions),
        Value::from(scopes),
        Value::from(identifiers),
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

/// Decodes the common columns of an outbox row.
pub(crate) fn row_from_result(
    row: &sea_orm::QueryResult,
    backend: DbBackend,
    shard: ShardKey,
) -> Result<StoredRow, StoreError> {
    let op = db_error("read outbox rows");
    Ok(StoredRow {
        id: row.try_get("", "id").map_err(&op)?,
        shard,
        category: row.try_get("", "category").map_err(&op)?,
        object_identifier: row.try_get("", "object_identifier").map_err(&op)?,
        payload: row.try_get("", "payload").map_err(&op)?,
        scheduled_from: time::get(row, backend, "scheduled_from")?,
        scheduled_for: time::get(row, backend, "scheduled_for")?,
        date_added: time::get(row, backend, "date_added")?,
    })
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
    if ids <= batch.delete_chunk && batch.shards.iter().all(|s| s.end == ShardEnd::Release) {
        return commit_finished_round(db, queries, batch).await;
    }
    let txn = db.begin().await.map_err(db_error("begin a commit"))?;
    let owned = fence(&txn, BACKEND, queries, batch).await?;
    let (mut outcome, owned_shards) = split_owned(batch, &owned);

    let ids: Vec<i64> = owned_shards
        .iter()
        .flat_map(|s| s.delete_ids.iter().copied())
        .collect();
    for chunk in ids.chunks(batch.delete_chunk.max(1)) {
        let result = txn
            .execute_raw(statement(
                BACKEND,
                &queries.delete_rows,
                vec![Value::from(chunk.to_vec())],
            ))
            .await
            .map_err(db_error("delete delivered rows"))?;
        outcome.deleted += result.rows_affected();
    }

    let released: Vec<&ShardCommit> = owned_shards
        .iter()
        .copied()
        .filter(|s| s.end == ShardEnd::Release)
        .collect();
    if !released.is_empty() {
        let (sql, mut values) = if released.len() == owned.len() {
            (&queries.release_all, Vec::new())
        } else {
            let regions: Vec<String> = released
                .iter()
                .map(|s| s.shard.region_name().unwrap_or("").to_owned())
                .collect();
            let scopes: Vec<i32> = released.iter().map(|s| s.shard.scope()).collect();
            let identifiers: Vec<i64> = released.iter().map(|s| s.shard.identifier()).collect();
            (
                &queries.release_some,
                vec![
                    Value::from(regions),
                    Value::from(scopes),
                    Value::from(identifiers),
                ],
            )
        };
        values.insert(0, Value::from(batch.token));
        values.insert(0, Value::from(batch.kind.as_i16()));
        txn.execute_raw(statement(BACKEND, sql, values))
            .await
            .map_err(db_error("release claims"))?;
    }

    for shard in &owned_shards {
        apply_backoff(&txn, BACKEND, queries, batch, shard).await?;
    }
    txn.commit()
        .await
        .map_err(db_error("commit a drain round"))?;
    Ok(outcome)
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

/// Renews this round's live claims, returning the shards still owned.
pub(crate) async fn fence<Db: ConnectionTrait>(
    txn: &Db,
    backend: DbBackend,
    queries: &Queries,
    batch: &CommitBatch,
) -> Result<HashSet<ShardKey>, StoreError> {
    let rows = txn
        .query_all_raw(statement(
            backend,
            &queries.fence,
            vec![
                Value::from(batch.kind.as_i16()),
                Value::from(batch.token),
                time::bind(backend, batch.now),
                time::bind(backend, batch.renew_until),
            ],
        ))
        .await
        .map_err(db_error("check claims"))?;
    rows.iter()
        .map(|row| {
            let op = db_error("check claims");
            let region: String = row.try_get("", "region_name").map_err(&op)?;
            let scope: i32 = row.try_get("", "shard_scope").map_err(&op)?;
            let identifier: i64 = row.try_get("", "shard_identifier").map_err(&op)?;
            Ok(ShardKey::from_raw(
                batch.kind,
                scope,
                identifier,
                Some(region),
            ))
        })
        .collect()
}

/// Splits a batch into the owned shards and an outcome listing the lost ones.
pub(crate) fn split_owned<'b>(
    batch: &'b CommitBatch,
    owned: &HashSet<ShardKey>,
) -> (CommitOutcome, Vec<&'b ShardCommit>) {
    let mut outcome = CommitOutcome::default();
    let mut kept = Vec::with_capacity(batch.shards.len());
    for shard in &batch.shards {
        if owned.contains(&shard.shard) {
            kept.push(shard);
        } else {
            outcome.lost.push(shard.shard.clone());
        }
    }
    (outcome, kept)
}

/// Turns a failed shard's claim into its backoff and reschedules its rows.
pub(crate) async fn apply_backoff<Db: ConnectionTrait>(
    txn: &Db,
    backend: DbBackend,
    queries: &Queries,
    batch: &CommitBatch,
    shard: &ShardCommit,
) -> Result<(), StoreError> {
    let ShardEnd::Backoff {
        retry_at,
        delay,
        error,
    } = &shard.end
    else {
        return Ok(());
    };
    let region = shard.shard.region_name().unwrap_or("").to_owned();
    let delay_ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
    let mut error = error.clone();
    if error.len() > 2000 {
        let mut cut = 2000;
        while !error.is_char_boundary(cut) {
            cut -= 1;
        }
        error.truncate(cut);
    }
    txn.execute_raw(statement(
        backend,
        &queries.backoff_claim,
        vec![
            Value::from(batch.kind.as_i16()),
            Value::from(batch.token),
            Value::from(region.clone()),
            Value::from(shard.shard.scope()),
            Value::from(shard.shard.identifier()),
            time::bind(backend, *retry_at),
            Value::from(delay_ms),
            Value::from(error),
        ],
    ))
    .await
    .map_err(db_error("record a shard's backoff"))?;
    let mut values = vec![
        Value::from(shard.shard.scope()),
        Value::from(shard.shard.identifier()),
        time::bind(backend, *retry_at),
        time::bind(backend, batch.now),
    ];
    if batch.kind == OutboxKind::Control {
        values.push(Value::from(region));
    }
    txn.execute_raw(statement(backend, &queries.backoff_rows, values))
        .await
        .map_err(db_error("reschedule a shard"))?;
    Ok(())
}
