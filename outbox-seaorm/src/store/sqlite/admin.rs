//! The SQLite store's inspection and administration (`StoreAdmin`): what
//! operators read and change, apart from the drain's hot path in `mod.rs`.

use super::*;

#[async_trait]
impl StoreAdmin for SqliteStore {
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
                vec![kind.as_i16().into(), at(now)],
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
                    at(outbox_core::store::paused_until()),
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
        const OP: &str = "replay dead letters";
        let txn = self.begin(OP).await?;
        let list = json(&ids)?;
        let values = vec![
            kind.as_i16().into(),
            list.clone(),
            at(outbox_core::store::due_at_once()),
        ];
        let moved = execute(&txn, &table(kind).replay_dead_letters, values, OP).await?;
        execute(
            &txn,
            DELETE_DEAD_LETTERS,
            vec![kind.as_i16().into(), list],
            OP,
        )
        .await?;
        txn.commit().await.map_err(op(OP))?;
        Ok(moved)
    }

    async fn retry_now(
        &self,
        shards: &[ShardKey],
        now: DateTime<Utc>,
    ) -> Result<Vec<ShardKey>, StoreError> {
        const OP: &str = "retry shards now";
        let mut wanted: Vec<&ShardKey> = shards.iter().collect();
        wanted.sort_unstable();
        wanted.dedup();
        // One write transaction: no claim runs in between.
        let txn = self.begin(OP).await?;
        let mut released = Vec::new();
        for shard in wanted {
            let held = query_all(
                &txn,
                BUCKET_HELD,
                vec![shard.kind().as_i16().into(), shard.bucket().into(), at(now)],
                OP,
            )
            .await?;
            if held.is_empty() {
                let mut key = vec![
                    shard.kind().as_i16().into(),
                    codec::region(shard).into(),
                    shard.scope().into(),
                    shard.identifier().into(),
                ];
                key.push(at(now));
                execute(&txn, RETRY_STATE, key, OP).await?;
                let values = shard_values(
                    shard,
                    vec![at(outbox_core::store::due_at_once()), at(now)],
                    Vec::new(),
                );
                execute(&txn, &table(shard.kind()).reset_schedule, values, OP).await?;
                released.push(shard.clone());
            }
        }
        txn.commit().await.map_err(op(OP))?;
        Ok(released)
    }

    /// Every row counted, then capped: the simplest reads, for a store
    /// that serves one process.
    async fn snapshot(
        &self,
        kind: OutboxKind,
        limit: usize,
        cap: u64,
    ) -> Result<outbox_core::store::AdminSnapshot, StoreError> {
        let sql = crate::store::snapshot::SnapshotSql::Exact {
            pending_count: &table(kind).pending_count,
            shard_depths: &table(kind).shard_depths,
            failing_shards: FAILING_SHARDS,
        };
        crate::store::snapshot::read(&self.db, &sql, kind, limit, cap).await
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

    /// SQLite has no per-table dead tuples nor concurrent transactions to
    /// report: both `None`.
    async fn table_health(
        &self,
        _kind: OutboxKind,
    ) -> Result<outbox_core::store::TableHealth, StoreError> {
        Ok(outbox_core::store::TableHealth::default())
    }

    async fn discard_dead_letters(&self, kind: OutboxKind, ids: &[i64]) -> Result<u64, StoreError> {
        const OP: &str = "discard dead letters";
        let txn = self.begin(OP).await?;
        let deleted = execute(
            &txn,
            DELETE_DEAD_LETTERS,
            vec![kind.as_i16().into(), json(&ids)?],
            OP,
        )
        .await?;
        txn.commit().await.map_err(op(OP))?;
        Ok(deleted)
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

    /// In one write transaction: no claim runs in between.
    async fn set_aside(
        &self,
        shard: &ShardKey,
        ids: &[i64],
        error: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<u64>, StoreError> {
        const OP: &str = "set a shard's head aside";
        let kind = shard.kind();
        let txn = self.begin(OP).await?;
        let held = query_all(
            &txn,
            BUCKET_HELD,
            vec![kind.as_i16().into(), shard.bucket().into(), at(now)],
            OP,
        )
        .await?;
        if !held.is_empty() {
            txn.rollback().await.map_err(op(OP))?;
            return Ok(None);
        }
        // Only rows of this shard.
        let owned: Vec<i64> = crate::store::head::read(&txn, shard, 10_000)
            .await?
            .iter()
            .map(|row| row.id)
            .filter(|id| ids.contains(id))
            .collect();
        let ids = json(&owned)?;
        let moved = execute(
            &txn,
            &table(kind).dead_letter,
            vec![
                kind.as_i16().into(),
                codec::storable_text(error).into(),
                at(now),
                ids.clone(),
            ],
            OP,
        )
        .await?;
        execute(&txn, &table(kind).delete_rows, vec![ids], OP).await?;
        let key = vec![
            kind.as_i16().into(),
            codec::region(shard).into(),
            shard.scope().into(),
            shard.identifier().into(),
        ];
        execute(&txn, DELETE_STATE, key, OP).await?;
        let values = shard_values(
            shard,
            vec![at(outbox_core::store::due_at_once()), at(now)],
            Vec::new(),
        );
        execute(&txn, &table(kind).reset_schedule, values, OP).await?;
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
