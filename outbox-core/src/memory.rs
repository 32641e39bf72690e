//! An in-memory [`Store`] for fast, deterministic tests.
//!
//! It keeps the same contract as the database stores (claims with leases and
//! fencing tokens, whole-shard backoff, bounded reads) so that the engine's
//! rules can be checked by property tests over random interleavings. Every
//! method is atomic, like a database statement.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::clock::Clock;
use crate::message::StoredRow;
use crate::registry::Category;
use crate::shard::{OutboxKind, ShardKey};
use crate::store::{
    ClaimRequest, CommitBatch, CommitOutcome, DeadLetterRow, ShardClaim, ShardDepth, ShardEnd,
    ShardRead, Store, StoreError,
};

#[derive(Clone, Debug)]
struct Lease {
    token: i64,
    held: bool,
    lease_until: DateTime<Utc>,
    last_backoff: Option<Duration>,
    attempts: u32,
}

#[derive(Debug, Default)]
struct State {
    next_id: i64,
    rows: HashMap<OutboxKind, BTreeMap<i64, StoredRow>>,
    leases: HashMap<ShardKey, Lease>,
    dead: HashMap<OutboxKind, BTreeMap<i64, DeadLetterRow>>,
    skip_before_failing: u32,
    fail_next: u32,
}

/// An in-memory outbox store. Clones share the same data.
#[derive(Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    clock: Option<Arc<dyn Clock>>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("state", &*self.lock())
            .finish_non_exhaustive()
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stamps `date_added` and `scheduled_from` of written rows from `clock`
    /// instead of the wall clock.
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> DateTime<Utc> {
        match &self.clock {
            Some(clock) => clock.now(),
            None => Utc::now(),
        }
    }

    /// Writes one row, as a committed transaction would; returns its id.
    pub fn write<C: Category>(
        &self,
        shard: &ShardKey,
        category: C,
        object_identifier: i64,
        payload: Option<Value>,
    ) -> i64 {
        self.write_raw(shard, category.value(), object_identifier, payload)
    }

    /// Writes one row with a raw category value (possibly unknown).
    pub fn write_raw(
        &self,
        shard: &ShardKey,
        category: i32,
        object_identifier: i64,
        payload: Option<Value>,
    ) -> i64 {
        let now = self.now();
        let mut state = self.lock();
        state.next_id += 1;
        let id = state.next_id;
        state.rows.entry(shard.kind()).or_default().insert(
            id,
            StoredRow {
                id,
                shard: shard.clone(),
                category,
                object_identifier,
                payload,
                scheduled_from: now,
                scheduled_for: crate::the_past(),
                date_added: now,
            },
        );
        id
    }

    /// Every pending row of `kind`, in id order.
    pub fn rows(&self, kind: OutboxKind) -> Vec<StoredRow> {
        self.lock()
            .rows
            .get(&kind)
            .map(|rows| rows.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Makes the next `count` store calls fail, as a lost database would.
    pub fn fail_next_calls(&self, count: u32) {
        self.fail_calls(0, count);
    }

    /// Lets `skip` store calls through, then fails the `count` after them
    /// (the database going away in the middle of a round).
    pub fn fail_calls(&self, skip: u32, count: u32) {
        let mut state = self.lock();
        state.skip_before_failing = skip;
        state.fail_next = count;
    }

    fn check_failure(state: &mut State, operation: &'static str) -> Result<(), StoreError> {
        if state.skip_before_failing > 0 {
            state.skip_before_failing -= 1;
            return Ok(());
        }
        if state.fail_next > 0 {
            state.fail_next -= 1;
            return Err(StoreError::database(
                operation,
                "injected failure: the in-memory store is unavailable",
            ));
        }
        Ok(())
    }

    fn grant(state: &mut State, request: &ClaimRequest, shard: &ShardKey) -> ShardClaim {
        let lease = state.leases.entry(shard.clone()).or_insert(Lease {
            token: 0,
            held: false,
            lease_until: request.now,
            last_backoff: None,
            attempts: 0,
        });
        lease.token = request.token;
        lease.held = true;
        lease.lease_until = request.lease_until;
        ShardClaim {
            shard: shard.clone(),
            token: request.token,
            lease_until: request.lease_until,
            last_backoff: lease.last_backoff,
            attempts: lease.attempts,
        }
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn claim_due(&self, request: &ClaimRequest) -> Result<Vec<ShardClaim>, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "claim due shards")?;
        let mut due: HashMap<ShardKey, (DateTime<Utc>, i64)> = HashMap::new();
        if let Some(rows) = state.rows.get(&request.kind) {
            for row in rows.values() {
                if row.scheduled_for > request.now || request.up_to_id.is_some_and(|up| row.id > up)
                {
                    continue;
                }
                let entry = due
                    .entry(row.shard.clone())
                    .or_insert((row.scheduled_for, row.id));
                entry.0 = entry.0.min(row.scheduled_for);
                entry.1 = entry.1.min(row.id);
            }
        }
        let mut due: Vec<(ShardKey, (DateTime<Utc>, i64))> = due
            .into_iter()
            .filter(|(shard, _)| {
                state
                    .leases
                    .get(shard)
                    .is_none_or(|lease| lease.lease_until <= request.now)
            })
            .collect();
        due.sort_by_key(|(_, order)| *order);
        due.truncate(request.limit);
        Ok(due
            .into_iter()
            .map(|(shard, _)| Self::grant(&mut state, request, &shard))
            .collect())
    }

    async fn claim_shard(
        &self,
        request: &ClaimRequest,
        shard: &ShardKey,
    ) -> Result<Option<ShardClaim>, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "claim a shard")?;
        let free = state
            .leases
            .get(shard)
            .is_none_or(|lease| !lease.held || lease.lease_until <= request.now);
        Ok(free.then(|| Self::grant(&mut state, request, shard)))
    }

    async fn read_rows(
        &self,
        kind: OutboxKind,
        shards: &[ShardRead],
        limit: usize,
    ) -> Result<Vec<StoredRow>, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "read outbox rows")?;
        let Some(rows) = state.rows.get(&kind) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for read in shards {
            out.extend(
                rows.values()
                    .filter(|row| {
                        row.shard == read.shard && read.up_to_id.is_none_or(|up| row.id <= up)
                    })
                    .take(limit)
                    .cloned(),
            );
        }
        Ok(out)
    }

    async fn commit(&self, batch: &CommitBatch) -> Result<CommitOutcome, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "commit a drain round")?;
        let mut outcome = CommitOutcome::default();
        for shard in &batch.shards {
            let owned = state.leases.get(&shard.shard).is_some_and(|lease| {
                lease.held && lease.token == batch.token && lease.lease_until > batch.now
            });
            if !owned {
                outcome.lost.push(shard.shard.clone());
                continue;
            }
            if let Some(rows) = state.rows.get_mut(&batch.kind) {
                for id in &shard.delete_ids {
                    if rows.get(id).is_some_and(|row| row.shard == shard.shard) {
                        rows.remove(id);
                        outcome.deleted += 1;
                    }
                }
            }
            if !shard.dead_letters.is_empty() {
                // The shard gave up on a group: its failure count starts over.
                if let Some(lease) = state.leases.get_mut(&shard.shard) {
                    lease.attempts = 0;
                    lease.last_backoff = None;
                }
            }
            for dead in &shard.dead_letters {
                for id in &dead.ids {
                    let moved = state
                        .rows
                        .get_mut(&batch.kind)
                        .and_then(|rows| rows.remove(id));
                    if let Some(row) = moved {
                        state.dead.entry(batch.kind).or_default().insert(
                            *id,
                            DeadLetterRow {
                                row,
                                error: dead.error.clone(),
                                dead_lettered_at: batch.now,
                            },
                        );
                        outcome.dead_lettered += 1;
                    }
                }
            }
            match &shard.end {
                ShardEnd::Continue => {
                    if let Some(lease) = state.leases.get_mut(&shard.shard) {
                        lease.lease_until = batch.renew_until;
                    }
                }
                ShardEnd::Release => {
                    state.leases.remove(&shard.shard);
                }
                ShardEnd::Backoff {
                    retry_at,
                    delay,
                    attempts,
                    ..
                } => {
                    if let Some(lease) = state.leases.get_mut(&shard.shard) {
                        lease.held = false;
                        lease.lease_until = *retry_at;
                        lease.last_backoff = Some(*delay);
                        lease.attempts = *attempts;
                    }
                    if let Some(rows) = state.rows.get_mut(&batch.kind) {
                        for row in rows.values_mut().filter(|row| row.shard == shard.shard) {
                            row.scheduled_for = *retry_at;
                            row.scheduled_from = batch.now;
                        }
                    }
                }
            }
        }
        Ok(outcome)
    }

    async fn expire_claims(
        &self,
        kind: OutboxKind,
        token: i64,
        now: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "expire abandoned claims")?;
        let mut expired = 0;
        for (shard, lease) in &mut state.leases {
            if shard.kind() == kind && lease.held && lease.token == token && lease.lease_until > now
            {
                lease.lease_until = now;
                expired += 1;
            }
        }
        Ok(expired)
    }

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
                depth: 0,
                oldest_date_added: row.date_added,
                next_scheduled_for: row.scheduled_for,
            });
            depth.depth += 1;
            depth.oldest_date_added = depth.oldest_date_added.min(row.date_added);
            depth.next_scheduled_for = depth.next_scheduled_for.min(row.scheduled_for);
        }
        let mut depths: Vec<ShardDepth> = depths.into_values().collect();
        depths.sort_by(|a, b| b.depth.cmp(&a.depth).then_with(|| a.shard.cmp(&b.shard)));
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

    async fn has_due(&self, kind: OutboxKind, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "look for due rows")?;
        let state = &*state;
        Ok(state.rows.get(&kind).is_some_and(|rows| {
            rows.values().any(|row| {
                row.scheduled_for <= now
                    && state
                        .leases
                        .get(&row.shard)
                        .is_none_or(|lease| lease.lease_until <= now)
            })
        }))
    }

    async fn dead_letters(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<DeadLetterRow>, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "list dead letters")?;
        Ok(state
            .dead
            .get(&kind)
            .map(|dead| dead.values().take(limit).cloned().collect())
            .unwrap_or_default())
    }

    async fn replay_dead_letters(&self, kind: OutboxKind, ids: &[i64]) -> Result<u64, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "replay dead letters")?;
        let mut moved = 0;
        for id in ids {
            let dead = state.dead.get_mut(&kind).and_then(|dead| dead.remove(id));
            if let Some(dead) = dead {
                let mut row = dead.row;
                row.scheduled_for = crate::the_past();
                state.rows.entry(kind).or_default().insert(*id, row);
                moved += 1;
            }
        }
        Ok(moved)
    }

    async fn max_id(&self, kind: OutboxKind) -> Result<Option<i64>, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "find the highest row id")?;
        Ok(state
            .rows
            .get(&kind)
            .and_then(|rows| rows.keys().next_back().copied()))
    }
}
