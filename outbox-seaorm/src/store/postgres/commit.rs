//! A round's commit: the common one in one statement
//! (`commit_finished.sql`), finished flushes many in one statement
//! (`complete.sql`), and any other (failures, dead letters, recovered
//! shards, deliveries still running) in one transaction of a few
//! statements: fence, delete, dead-letter, backoff states and schedules.

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DatabaseTransaction, TransactionTrait};

use outbox_core::store::{CommitBatch, CommitOutcome, ShardCommit, ShardEnd};
use outbox_core::{OutboxKind, ShardKey, StoreError};

use super::{
    addresses, key_arrays, statement, table, PgStore, DELETE_STATES, FENCE, UPSERT_STATES,
};
use crate::store::codec::{self, get, op};

impl PgStore {
    /// The buckets a releasing statement (`commit_finished.sql`,
    /// `complete.sql`) released, sorted, with where their rows are now
    /// recorded (`addresses.rs`).
    fn released(
        &self,
        kind: OutboxKind,
        row: &sea_orm::QueryResult,
        operation: &'static str,
    ) -> Result<Vec<i32>, StoreError> {
        let mut owned: Vec<i32> = get(row, "owned", operation)?;
        let addresses: Vec<String> = get(row, "addresses", operation)?;
        let addresses: Vec<i64> = addresses.iter().map(|tid| addresses::parse(tid)).collect();
        self.addresses.record_all(kind, &owned, &addresses);
        owned.sort_unstable();
        Ok(owned)
    }

    /// The common commit: one statement.
    pub(super) async fn commit_finished(
        &self,
        batch: &CommitBatch,
    ) -> Result<CommitOutcome, StoreError> {
        const OP: &str = "commit a drain round";
        let ids: Vec<i64> = batch
            .shards
            .iter()
            .flat_map(|shard| shard.delete_ids.iter().copied())
            .collect();
        let buckets = codec::batch_buckets(batch);
        let addresses = self.addresses.of(batch.kind, &buckets);
        let row = self
            .query_one(
                &table(batch.kind).commit_finished,
                vec![
                    batch.kind.as_i16().into(),
                    batch.token.into(),
                    batch.now.into(),
                    ids.into(),
                    buckets.into(),
                    addresses.into(),
                ],
                OP,
            )
            .await?
            .ok_or_else(|| StoreError::Malformed {
                what: "commit result",
                detail: "the commit returned no row".to_owned(),
            })?;
        let owned = self.released(batch.kind, &row, OP)?;
        let deleted: i64 = get(&row, "deleted", OP)?;
        Ok(CommitOutcome {
            deleted: u64::try_from(deleted).unwrap_or(0),
            dead_lettered: 0,
            lost: codec::lost(batch.shards.iter().map(|s| &s.shard), &owned),
        })
    }

    /// Completes finished flushes `which` of `batches` (of one kind, no
    /// bucket in two of them) in one statement.
    pub(super) async fn complete_distinct(
        &self,
        batches: &[CommitBatch],
        which: &[usize],
    ) -> Result<Vec<CommitOutcome>, StoreError> {
        const OP: &str = "complete synchronous flushes";
        let Some(first) = which.first() else {
            return Ok(Vec::new());
        };
        let kind = batches[*first].kind;
        let (mut buckets, mut tokens, mut ids) = (Vec::new(), Vec::new(), Vec::new());
        let mut now = batches[*first].now;
        for &index in which {
            let batch = &batches[index];
            now = now.max(batch.now);
            for bucket in codec::batch_buckets(batch) {
                buckets.push(bucket);
                tokens.push(batch.token);
            }
            ids.extend(
                batch
                    .shards
                    .iter()
                    .flat_map(|s| s.delete_ids.iter().copied()),
            );
        }
        let row = self
            .query_one(
                &table(kind).complete,
                vec![
                    kind.as_i16().into(),
                    now.into(),
                    buckets.into(),
                    tokens.into(),
                    ids.into(),
                ],
                OP,
            )
            .await?
            .ok_or_else(|| StoreError::Malformed {
                what: "completion result",
                detail: "the completion returned no row".to_owned(),
            })?;
        let owned = self.released(kind, &row, OP)?;
        Ok(which
            .iter()
            .map(|&index| {
                let batch = &batches[index];
                let lost = codec::lost(batch.shards.iter().map(|s| &s.shard), &owned);
                let deleted = batch
                    .shards
                    .iter()
                    .filter(|shard| !lost.contains(&shard.shard))
                    .map(|shard| shard.delete_ids.len() as u64)
                    .sum();
                CommitOutcome {
                    deleted,
                    dead_lettered: 0,
                    lost,
                }
            })
            .collect())
    }

    /// Any other commit: one transaction.
    pub(super) async fn commit_in_transaction(
        &self,
        batch: &CommitBatch,
    ) -> Result<CommitOutcome, StoreError> {
        const OP: &str = "commit a drain round";
        let txn = self.db.begin().await.map_err(op(OP))?;
        let fenced = txn
            .query_all_raw(statement(
                FENCE,
                vec![
                    batch.kind.as_i16().into(),
                    batch.token.into(),
                    batch.now.into(),
                    codec::buckets(&batch.in_flight).into(),
                    batch.renew_until.into(),
                    codec::batch_buckets(batch).into(),
                ],
            ))
            .await
            .map_err(op(OP))?;
        let (kept, mut outcome) = codec::fenced(batch, &fenced, OP)?;
        outcome.deleted = delete_rows(&txn, batch.kind, &kept).await?;
        outcome.dead_lettered = dead_letter(&txn, batch, &kept).await?;
        apply_ends(&txn, batch, &kept).await?;
        txn.commit().await.map_err(op(OP))?;
        Ok(outcome)
    }
}

async fn delete_rows(
    txn: &DatabaseTransaction,
    kind: OutboxKind,
    shards: &[&ShardCommit],
) -> Result<u64, StoreError> {
    let ids: Vec<i64> = shards
        .iter()
        .flat_map(|shard| shard.delete_ids.iter().copied())
        .collect();
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(txn
        .execute_raw(statement(&table(kind).delete_rows, vec![ids.into()]))
        .await
        .map_err(op("delete delivered rows"))?
        .rows_affected())
}

async fn dead_letter(
    txn: &DatabaseTransaction,
    batch: &CommitBatch,
    shards: &[&ShardCommit],
) -> Result<u64, StoreError> {
    let mut moved = 0;
    for dead in shards.iter().flat_map(|shard| &shard.dead_letters) {
        moved += txn
            .execute_raw(statement(
                &table(batch.kind).dead_letter,
                vec![
                    batch.kind.as_i16().into(),
                    codec::storable_text(&dead.error).into(),
                    batch.now.into(),
                    dead.ids.clone().into(),
                ],
            ))
            .await
            .map_err(op("dead-letter rows"))?
            .rows_affected();
    }
    Ok(moved)
}

/// Backoff states and schedules: failed shards get a state and their rows
/// move to their next attempt; rows written to backing-off shards join them;
/// recovered shards lose their state and their rows are due again.
async fn apply_ends(
    txn: &DatabaseTransaction,
    batch: &CommitBatch,
    shards: &[&ShardCommit],
) -> Result<(), StoreError> {
    const OP: &str = "record backoff";
    let kind = batch.kind;
    let mut later: Vec<(&ShardKey, DateTime<Utc>)> = Vec::new();
    let mut failed = Vec::new();
    let mut recovered = Vec::new();
    for shard in shards {
        match &shard.end {
            ShardEnd::Done => {}
            ShardEnd::Recovered => recovered.push(&shard.shard),
            ShardEnd::Wait { retry_at } => later.push((&shard.shard, *retry_at)),
            ShardEnd::Backoff { retry_at, .. } => {
                later.push((&shard.shard, *retry_at));
                failed.push(*shard);
            }
        }
    }
    if !failed.is_empty() {
        let [regions, scopes, identifiers] = key_arrays(failed.iter().map(|s| &s.shard));
        let (mut attempts, mut delays, mut retries, mut errors) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for shard in &failed {
            if let ShardEnd::Backoff {
                retry_at,
                delay,
                error,
                attempts: count,
            } = &shard.end
            {
                attempts.push(i32::try_from(*count).unwrap_or(i32::MAX));
                delays.push(codec::millis(*delay));
                retries.push(*retry_at);
                errors.push(codec::error_text(error));
            }
        }
        let values = vec![
            kind.as_i16().into(),
            regions,
            scopes,
            identifiers,
            attempts.into(),
            delays.into(),
            retries.into(),
            errors.into(),
            batch.now.into(),
        ];
        txn.execute_raw(statement(UPSERT_STATES, values))
            .await
            .map_err(op(OP))?;
    }
    if !later.is_empty() {
        let [regions, scopes, identifiers] = key_arrays(later.iter().map(|(s, _)| *s));
        let times: Vec<DateTime<Utc>> = later.iter().map(|(_, at)| *at).collect();
        let values = vec![batch.now.into(), regions, scopes, identifiers, times.into()];
        txn.execute_raw(statement(&table(kind).reschedule, values))
            .await
            .map_err(op(OP))?;
    }
    forget_states(txn, kind, batch.now, &recovered).await
}

/// Forgets the backoff state of `shards` and makes their rows due again:
/// recovered shards, and shards retried now.
async fn forget_states(
    txn: &DatabaseTransaction,
    kind: OutboxKind,
    now: DateTime<Utc>,
    shards: &[&ShardKey],
) -> Result<(), StoreError> {
    const OP: &str = "forget backoff states";
    if shards.is_empty() {
        return Ok(());
    }
    let [regions, scopes, identifiers] = key_arrays(shards.iter().copied());
    txn.execute_raw(statement(
        DELETE_STATES,
        vec![
            kind.as_i16().into(),
            regions.clone(),
            scopes.clone(),
            identifiers.clone(),
        ],
    ))
    .await
    .map_err(op(OP))?;
    txn.execute_raw(statement(
        &table(kind).reset_schedule,
        vec![
            now.into(),
            regions,
            scopes,
            identifiers,
            outbox_core::store::due_at_once().into(),
        ],
    ))
    .await
    .map_err(op(OP))?;
    Ok(())
}
