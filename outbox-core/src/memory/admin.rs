//! `MemoryStore`'s inspection and administration (`StoreAdmin`): what
//! operators and tests read and change, apart from the drain's hot path in
//! `mod.rs`.

use super::*;

#[async_trait]
impl StoreAdmin for MemoryStore {
    async fn pending_count(&self, kind: OutboxKind) -> Result<u64, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "count pending rows")?;
        Ok(state.rows.get(&kind).map_or(0, |rows| rows.len() as u64))
    }

    async fn shard_depths(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<ShardDepth>, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "measure shard depths")?;
        let mut depths: HashMap<ShardKey, ShardDepth> = HashMap::new();
        for row in state.rows.get(&kind).into_iter().flat_map(|r| r.values()) {
            let depth = depths.entry(row.shard.clone()).or_insert(ShardDepth {
                shard: row.shard.clone(),
                depth: Count::Exact(0),
                oldest_date_added: row.date_added,
                next_scheduled_for: row.scheduled_for,
            });
            depth.depth = depth.depth + Count::Exact(1);
            depth.oldest_date_added = depth.oldest_date_added.min(row.date_added);
            depth.next_scheduled_for = depth.next_scheduled_for.min(row.scheduled_for);
        }
        let mut depths: Vec<ShardDepth> = depths.into_values().collect();
        depths.sort_by(|a, b| {
            b.depth
                .value()
                .cmp(&a.depth.value())
                .then_with(|| a.shard.cmp(&b.shard))
        });
        depths.truncate(limit);
        Ok(depths)
    }

    async fn oldest_pending(&self, kind: OutboxKind) -> Result<Option<DateTime<Utc>>, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "find the oldest pending row")?;
        Ok(state
            .rows
            .get(&kind)
            .and_then(|rows| rows.values().map(|row| row.date_added).min()))
    }

    async fn max_id(&self, kind: OutboxKind) -> Result<Option<i64>, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "find the highest row id")?;
        Ok(state
            .rows
            .get(&kind)
            .and_then(|rows| rows.keys().next_back().copied()))
    }

    async fn has_due(&self, kind: OutboxKind, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "look for due rows")?;
        let state = &*state;
        Ok(state.rows.get(&kind).is_some_and(|rows| {
            rows.values().any(|row| {
                row.scheduled_for <= now
                    && !state.held(kind, row.shard.bucket(), now)
                    && state
                        .states
                        .get(&row.shard)
                        .is_none_or(|backoff| backoff.retry_at <= now)
            })
        }))
    }

    async fn failing_shards(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<FailingShard>, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "list failing shards")?;
        let mut failing: Vec<FailingShard> = state
            .states
            .iter()
            .filter(|(shard, _)| shard.kind() == kind)
            .map(|(shard, backoff)| FailingShard {
                shard: shard.clone(),
                state: backoff.clone(),
            })
            .collect();
        failing.sort_by(|a, b| (a.state.retry_at, &a.shard).cmp(&(b.state.retry_at, &b.shard)));
        failing.truncate(limit);
        Ok(failing)
    }

    async fn parked_shards(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<FailingShard>, StoreError> {
        let mut parked = self.failing_shards(kind, usize::MAX).await?;
        parked.retain(|shard| shard.state.is_parked());
        parked.truncate(limit);
        Ok(parked)
    }

    async fn dead_letters(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<DeadLetterRow>, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "list dead letters")?;
        let mut dead: Vec<DeadLetterRow> = state
            .dead
            .get(&kind)
            .map(|dead| dead.values().cloned().collect())
            .unwrap_or_default();
        dead.sort_by_key(|dead| (dead.dead_lettered_at, dead.row.id));
        dead.truncate(limit);
        Ok(dead)
    }

    async fn replay_dead_letters(&self, kind: OutboxKind, ids: &[i64]) -> Result<u64, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "replay dead letters")?;
        let mut moved = 0;
        for id in ids {
            let dead = state.dead.get_mut(&kind).and_then(|dead| dead.remove(id));
            if let Some(dead) = dead {
                let mut row = dead.row;
                row.scheduled_for = crate::schedule::due_at_once();
                state.rows.entry(kind).or_default().insert(*id, row);
                moved += 1;
            }
        }
        Ok(moved)
    }

    /// Every row counted, then capped as the SQL stores cap them: exact up
    /// to `cap`, else at least `cap`.
    async fn snapshot(
        &self,
        kind: OutboxKind,
        limit: usize,
        cap: u64,
    ) -> Result<crate::store::AdminSnapshot, StoreError> {
        // One point in time: the separate reads over a copy of the state
        // taken under one lock.
        let copy = Self {
            state: Arc::new(Mutex::new(self.lock().clone())),
            clock: self.clock.clone(),
        };
        let dead_letters = copy
            .lock()
            .dead
            .get(&kind)
            .map_or(0, |dead| dead.len() as u64);
        let mut deepest = copy.shard_depths(kind, limit).await?;
        for shard in &mut deepest {
            shard.depth = Count::up_to(shard.depth.value(), cap);
        }
        Ok(crate::store::AdminSnapshot {
            kind,
            pending: Count::up_to(copy.pending_count(kind).await?, cap),
            deepest,
            failing: copy.failing_shards(kind, limit).await?,
            dead_letters: Count::up_to(dead_letters, cap),
        })
    }

    /// Nothing to vacuum and no transactions here: both `None`.
    async fn table_health(
        &self,
        _kind: OutboxKind,
    ) -> Result<crate::store::TableHealth, StoreError> {
        Ok(crate::store::TableHealth::default())
    }

    async fn discard_dead_letters(&self, kind: OutboxKind, ids: &[i64]) -> Result<u64, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "discard dead letters")?;
        let Some(dead) = state.dead.get_mut(&kind) else {
            return Ok(0);
        };
        Ok(ids.iter().filter(|id| dead.remove(id).is_some()).count() as u64)
    }

    async fn retry_now(
        &self,
        shards: &[ShardKey],
        now: DateTime<Utc>,
    ) -> Result<Vec<ShardKey>, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "retry shards now")?;
        let mut released = Vec::new();
        for shard in shards {
            if state.held(shard.kind(), shard.bucket(), now) || released.contains(shard) {
                continue;
            }
            if let Some(shard_state) = state.states.get_mut(shard) {
                shard_state.retry_at = now;
            }
            state.reschedule(shard, now, |at| {
                (at > crate::schedule::due_at_once()).then(crate::schedule::due_at_once)
            });
            released.push(shard.clone());
        }
        Ok(released)
    }

    /// Never fails, and does not count as a call for
    /// [`fail_calls`](Self::fail_calls): drains read the controls about once
    /// a second, which would shift the calls tests aim their failures at.
    async fn controls(&self) -> Result<Vec<crate::control::RuntimeControl>, StoreError> {
        Ok(self.lock().controls.clone())
    }

    async fn set_control(
        &self,
        control: &crate::control::RuntimeControl,
    ) -> Result<(), StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "set a runtime control")?;
        state.controls.retain(|old| old.target != control.target);
        state.controls.push(control.clone());
        Ok(())
    }

    async fn clear_control(
        &self,
        target: &crate::control::ControlTarget,
    ) -> Result<bool, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "clear a runtime control")?;
        let before = state.controls.len();
        state.controls.retain(|old| &old.target != target);
        Ok(state.controls.len() < before)
    }

    async fn record_audit(
        &self,
        entry: &crate::audit::AuditEntry,
        keep_after: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "record an operator action")?;
        state.last_audit_id += 1;
        let id = state.last_audit_id;
        state.audit.push(crate::audit::AuditRecord {
            id,
            entry: entry.clone().bounded(),
        });
        state.audit.retain(|record| record.entry.at >= keep_after);
        Ok(())
    }

    async fn audit_log(&self, limit: usize) -> Result<Vec<crate::audit::AuditRecord>, StoreError> {
        let state = self.lock();
        Ok(state.audit.iter().rev().take(limit).cloned().collect())
    }

    async fn shard_head(
        &self,
        shard: &ShardKey,
        limit: usize,
    ) -> Result<Vec<StoredRow>, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "read a shard's head")?;
        Ok(state.shard_rows(shard, None, limit))
    }

    async fn set_aside(
        &self,
        shard: &ShardKey,
        ids: &[i64],
        error: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<u64>, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "set a shard's head aside")?;
        let kind = shard.kind();
        if state.held(kind, shard.bucket(), now) {
            return Ok(None);
        }
        let mut moved = 0;
        for id in ids {
            let row = state
                .rows
                .get_mut(&kind)
                .filter(|rows| rows.get(id).is_some_and(|row| &row.shard == shard))
                .and_then(|rows| rows.remove(id));
            if let Some(row) = row {
                let dead = DeadLetterRow {
                    row,
                    error: error.to_owned(),
                    dead_lettered_at: now,
                };
                state.dead.entry(kind).or_default().insert(*id, dead);
                moved += 1;
            }
        }
        state.states.remove(shard);
        state.reschedule(shard, now, |at| {
            (at > crate::schedule::due_at_once()).then(crate::schedule::due_at_once)
        });
        Ok(Some(moved))
    }

    async fn record_history(
        &self,
        samples: &[crate::history::Sample],
        keep_after: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "record history")?;
        for sample in samples {
            let known = state.history.iter().any(|old| {
                (old.at, old.kind, &old.scope, &old.owner)
                    == (sample.at, sample.kind, &sample.scope, &sample.owner)
            });
            if !known {
                state.history.push(sample.clone());
            }
        }
        state.history.retain(|sample| sample.at >= keep_after);
        Ok(())
    }

    async fn history(
        &self,
        kind: OutboxKind,
        since: DateTime<Utc>,
    ) -> Result<Vec<crate::history::Sample>, StoreError> {
        let state = self.lock();
        let mut samples: Vec<crate::history::Sample> = state
            .history
            .iter()
            .filter(|sample| sample.kind == kind && sample.at >= since)
            .cloned()
            .collect();
        samples.sort_by_key(|sample| sample.at);
        Ok(samples)
    }
}
