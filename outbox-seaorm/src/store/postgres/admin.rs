//! The PostgreSQL store's inspection and administration (`StoreAdmin`): what
//! operators read and change, apart from the drain's hot path in `mod.rs`.

use super::*;

#[async_trait]
impl StoreAdmin for PgStore {
    async fn pending_count(&self, kind: OutboxKind) -> Result<u64, StoreError> {
        const OP: &str = "count pending rows";
        let row = self
            .query_one(&table(kind).pending_count, vec![], OP)
            .await?;
        let count: i64 = match row {
            Some(row) => get(&row, "n", OP)?,
            None => 0,
        };
        Ok(u64::try_from(count).unwrap_or(0))
    }

    async fn shard_depths(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<ShardDepth>, StoreError> {
        const OP: &str = "measure shard depths";
        let rows = self
            .query_all(
                &table(kind).shard_depths,
                vec![codec::limit(limit).into()],
                OP,
            )
            .await?;
        crate::store::snapshot::shard_depths(
            &rows,
            kind,
            BACKEND,
            crate::store::snapshot::DepthCount::Exact,
        )
    }

    async fn oldest_pending(&self, kind: OutboxKind) -> Result<Option<DateTime<Utc>>, StoreError> {
        let row = self
            .query_one(
                &table(kind).oldest_pending,
                vec![],
                "find the oldest pending row",
            )
            .await?;
        match row {
            Some(row) => time::get_opt(&row, BACKEND, "oldest"),
            None => Ok(None),
        }
    }

    async fn max_id(&self, kind: OutboxKind) -> Result<Option<i64>, StoreError> {
        const OP: &str = "find the highest row id";
        match self.query_one(&table(kind).max_id, vec![], OP).await? {
            Some(row) => get(&row, "max_id", OP),
            None => Ok(None),
        }
    }

    async fn has_due(&self, kind: OutboxKind, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let row = self
            .query_one(
                &table(kind).has_due,
                vec![kind.as_i16().into(), now.into()],
                "look for due rows",
            )
            .await?;
        Ok(row.is_some())
    }

    async fn failing_shards(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<FailingShard>, StoreError> {
        let rows = self
            .query_all(
                FAILING_SHARDS,
                vec![kind.as_i16().into(), codec::limit(limit).into()],
                "list failing shards",
            )
            .await?;
        codec::failing_shards(&rows, kind, BACKEND)
    }

    /// One statement: the stored errors that say the shard is parked.
    async fn parked_shards(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<FailingShard>, StoreError> {
        let rows = self
            .query_all(
                PARKED_SHARDS,
                vec![
                    kind.as_i16().into(),
                    codec::limit(limit).into(),
                    outbox_core::store::paused_until().into(),
                ],
                "list parked shards",
            )
            .await?;
        codec::failing_shards(&rows, kind, BACKEND)
    }

    async fn dead_letters(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<DeadLetterRow>, StoreError> {
        let rows = self
            .query_all(
                DEAD_LETTERS,
                vec![kind.as_i16().into(), codec::limit(limit).into()],
                "list dead letters",
            )
            .await?;
        codec::dead_letter_rows(&rows, kind, BACKEND)
    }

    async fn replay_dead_letters(&self, kind: OutboxKind, ids: &[i64]) -> Result<u64, StoreError> {
        Ok(self
            .db
            .execute_raw(statement(
                &table(kind).replay_dead_letters,
                vec![
                    kind.as_i16().into(),
                    ids.to_vec().into(),
                    outbox_core::store::due_at_once().into(),
                ],
            ))
            .await
            .map_err(op("replay dead letters"))?
            .rows_affected())
    }

    async fn retry_now(
        &self,
        shards: &[ShardKey],
        now: DateTime<Utc>,
    ) -> Result<Vec<ShardKey>, StoreError> {
        const OP: &str = "retry shards now";
        let mut released = Vec::new();
        for kind in OutboxKind::ALL {
            let mut wanted: Vec<&ShardKey> = shards.iter().filter(|s| s.kind() == kind).collect();
            wanted.sort_unstable();
            wanted.dedup();
            if wanted.is_empty() {
                continue;
            }
            let buckets = codec::buckets(wanted.iter().copied());
            let txn = self.db.begin().await.map_err(op(OP))?;
            let free = lock_free_buckets(&txn, kind, buckets, now, OP).await?;
            wanted.retain(|shard| free.contains(&shard.bucket()));
            if !wanted.is_empty() {
                let [regions, scopes, identifiers] = key_arrays(wanted.iter().copied());
                let retried = vec![
                    kind.as_i16().into(),
                    regions.clone(),
                    scopes.clone(),
                    identifiers.clone(),
                    now.into(),
                ];
                txn.execute_raw(statement(RETRY_STATES, retried))
                    .await
                    .map_err(op(OP))?;
                let key = [regions, scopes, identifiers];
                reset_schedule(&txn, kind, key, now, OP).await?;
            }
            txn.commit().await.map_err(op(OP))?;
            released.extend(wanted.into_iter().cloned());
        }
        Ok(released)
    }

    async fn snapshot(
        &self,
        kind: OutboxKind,
        limit: usize,
        cap: u64,
    ) -> Result<outbox_core::store::AdminSnapshot, StoreError> {
        let sql = crate::store::snapshot::SnapshotSql::Capped {
            pending: &table(kind).count_pending,
            shard_depths: &table(kind).deepest_shards,
            failing_shards: FAILING_SHARDS,
        };
        crate::store::snapshot::read(&self.db, &sql, kind, limit, cap).await
    }

    async fn read_backlog(
        &self,
        kind: OutboxKind,
        cap: u64,
    ) -> Result<outbox_core::store::BacklogReading, StoreError> {
        const OP: &str = "read the backlog";
        let rows = self
            .query_all(
                &table(kind).backlog,
                vec![
                    crate::store::snapshot::cap_param(cap).into(),
                    kind.as_i16().into(),
                    outbox_core::store::paused_until().into(),
                    outbox_core::store::quarantined_until().into(),
                ],
                OP,
            )
            .await?;
        backlog::decode(&rows, cap, OP)
    }

    async fn scope_depths(
        &self,
        kind: OutboxKind,
    ) -> Result<Vec<outbox_core::ScopeDepth>, StoreError> {
        crate::store::snapshot::scope_depths(&self.db, kind).await
    }

    async fn dead_letter_count(&self, kind: OutboxKind) -> Result<u64, StoreError> {
        crate::store::snapshot::dead_letter_count(&self.db, kind).await
    }

    async fn table_health(
        &self,
        kind: OutboxKind,
    ) -> Result<outbox_core::store::TableHealth, StoreError> {
        const OP: &str = "read table health";
        let table = match kind {
            OutboxKind::Region => "region_outbox",
            OutboxKind::Control => "control_outbox",
        };
        let row = self.query_one(TABLE_HEALTH, vec![table.into()], OP).await?;
        let Some(row) = row else {
            return Ok(outbox_core::store::TableHealth::default());
        };
        health::decode(&row, OP)
    }

    async fn discard_dead_letters(&self, kind: OutboxKind, ids: &[i64]) -> Result<u64, StoreError> {
        Ok(self
            .db
            .execute_raw(statement(
                "DELETE FROM outbox_dead_letter WHERE kind = $1 AND id = ANY($2::bigint[])",
                vec![kind.as_i16().into(), ids.to_vec().into()],
            ))
            .await
            .map_err(op("discard dead letters"))?
            .rows_affected())
    }

    async fn controls(&self) -> Result<Vec<outbox_core::RuntimeControl>, StoreError> {
        crate::store::controls::read(&self.db).await
    }

    async fn set_control(&self, control: &outbox_core::RuntimeControl) -> Result<(), StoreError> {
        crate::store::controls::set(&self.db, control).await
    }

    async fn clear_control(&self, target: &outbox_core::ControlTarget) -> Result<bool, StoreError> {
        crate::store::controls::clear(&self.db, target).await
    }

    async fn record_audit(
        &self,
        entry: &outbox_core::audit::AuditEntry,
        keep_after: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        crate::store::audit::record(&self.db, entry, keep_after).await
    }

    async fn audit_log(
        &self,
        limit: usize,
    ) -> Result<Vec<outbox_core::audit::AuditRecord>, StoreError> {
        crate::store::audit::list(&self.db, limit).await
    }

    async fn shard_head(
        &self,
        shard: &ShardKey,
        limit: usize,
    ) -> Result<Vec<outbox_core::message::StoredRow>, StoreError> {
        crate::store::head::read(&self.db, shard, limit).await
    }

    /// In one transaction, under the shard's bucket row lock (taken only
    /// when no lease holds it, as `retry_now` does).
    async fn set_aside(
        &self,
        shard: &ShardKey,
        ids: &[i64],
        error: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<u64>, StoreError> {
        const OP: &str = "set a shard's head aside";
        let kind = shard.kind();
        let txn = self.db.begin().await.map_err(op(OP))?;
        if lock_free_buckets(&txn, kind, vec![shard.bucket()], now, OP)
            .await?
            .is_empty()
        {
            txn.rollback().await.map_err(op(OP))?;
            return Ok(None);
        }
        let moved = txn
            .execute_raw(statement(
                &table(kind).dead_letter,
                vec![
                    kind.as_i16().into(),
                    codec::storable_text(error).into(),
                    now.into(),
                    ids.to_vec().into(),
                ],
            ))
            .await
            .map_err(op(OP))?
            .rows_affected();
        let [regions, scopes, identifiers] = key_arrays(std::iter::once(shard));
        let key = vec![
            kind.as_i16().into(),
            regions.clone(),
            scopes.clone(),
            identifiers.clone(),
        ];
        txn.execute_raw(statement(DELETE_STATES, key))
            .await
            .map_err(op(OP))?;
        reset_schedule(&txn, kind, [regions, scopes, identifiers], now, OP).await?;
        txn.commit().await.map_err(op(OP))?;
        Ok(Some(moved))
    }

    async fn record_history(
        &self,
        samples: &[outbox_core::history::Sample],
        keep_after: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        crate::store::history::record(&self.db, samples, keep_after).await
    }

    async fn history(
        &self,
        kind: outbox_core::OutboxKind,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<outbox_core::history::Sample>, StoreError> {
        crate::store::history::list(&self.db, kind, since).await
    }
}

/// Locks, in `txn`, the buckets of `buckets` that no lease holds at `now`
/// (their rows made first if need be): a change of shard states outside a
/// claim (`retry_now`, `set_aside`). Returns the buckets it locked.
async fn lock_free_buckets(
    txn: &sea_orm::DatabaseTransaction,
    kind: OutboxKind,
    buckets: Vec<i32>,
    now: DateTime<Utc>,
    operation: &'static str,
) -> Result<Vec<i32>, StoreError> {
    let create = vec![
        kind.as_i16().into(),
        buckets.clone().into(),
        outbox_core::store::due_at_once().into(),
    ];
    txn.execute_raw(statement(CREATE_BUCKETS, create))
        .await
        .map_err(op(operation))?;
    let lock = vec![kind.as_i16().into(), buckets.into(), now.into()];
    txn.query_all_raw(statement(LOCK_FREE_BUCKETS, lock))
        .await
        .map_err(op(operation))?
        .iter()
        .map(|row| get::<i32>(row, "bucket", operation))
        .collect()
}

/// Makes the rows of the shards `key` (regions, scopes, identifiers) due
/// at once again.
async fn reset_schedule(
    txn: &sea_orm::DatabaseTransaction,
    kind: OutboxKind,
    key: [Value; 3],
    now: DateTime<Utc>,
    operation: &'static str,
) -> Result<(), StoreError> {
    let [regions, scopes, identifiers] = key;
    let schedule = vec![
        now.into(),
        regions,
        scopes,
        identifiers,
        outbox_core::store::due_at_once().into(),
    ];
    txn.execute_raw(statement(&table(kind).reset_schedule, schedule))
        .await
        .map_err(op(operation))?;
    Ok(())
}
