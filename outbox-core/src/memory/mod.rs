//! An in-memory store for fast, deterministic tests.
//!
//! It keeps the contract of the database stores (bucket leases with fencing
//! tokens, whole-shard backoff state, prefixes of rows in id order), so that
//! the conformance suite and the property tests check the engine against the
//! same rules. Every method is atomic, like a database statement; writes can
//! be grouped in a [`MemoryTransaction`] that commits or rolls back.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::clock::Clock;
use crate::fence_token::FencingToken;
use crate::message::StoredRow;
use crate::payload::Payload;
use crate::registry::contract::TypedCategory;
use crate::registry::Category;
use crate::shard::{OutboxKind, ShardKey, MAX_BUCKETS_PER_CLAIM};
use crate::store::{
    ClaimBeforeCommit, ClaimOrder, ClaimRequest, ClaimedShard, CommitBatch, CommitOutcome, Count,
    DeadLetterRow, DrainStore, DueClaim, FailingShard, ShardClaim, ShardDepth, ShardEnd,
    ShardState, StoreAdmin, StoreError,
};

mod admin;

#[derive(Clone, Debug)]
struct Lease {
    token: Option<i64>,
    lease_until: DateTime<Utc>,
}

impl Lease {
    fn live_for(&self, token: i64, now: DateTime<Utc>) -> bool {
        self.token == Some(token) && self.lease_until > now
    }

    fn is_live(&self, now: DateTime<Utc>) -> bool {
        self.token.is_some() && self.lease_until > now
    }
}

#[derive(Clone, Debug, Default)]
struct State {
    next_id: i64,
    /// The last fencing token handed out (a database sequence).
    fence: i64,
    rows: HashMap<OutboxKind, BTreeMap<i64, StoredRow>>,
    leases: HashMap<(OutboxKind, i32), Lease>,
    states: HashMap<ShardKey, ShardState>,
    dead: HashMap<OutboxKind, BTreeMap<i64, DeadLetterRow>>,
    controls: Vec<crate::control::RuntimeControl>,
    audit: Vec<crate::audit::AuditRecord>,
    last_audit_id: i64,
    history: Vec<crate::history::Sample>,
    skip_before_failing: u32,
    fail_next: u32,
    next_transaction: u64,
    /// Buckets claimed by an open transaction (a row lock, on a database):
    /// held for everyone else until it commits or rolls back.
    reserved: HashMap<(OutboxKind, i32), u64>,
}

impl State {
    fn held(&self, kind: OutboxKind, bucket: i32, now: DateTime<Utc>) -> bool {
        self.reserved.contains_key(&(kind, bucket))
            || self
                .leases
                .get(&(kind, bucket))
                .is_some_and(|lease| lease.is_live(now))
    }

    /// The pending rows of `shard` up to `up_to`, in id order, at most `limit`.
    fn shard_rows(&self, shard: &ShardKey, up_to: Option<i64>, limit: usize) -> Vec<StoredRow> {
        self.rows
            .get(&shard.kind())
            .into_iter()
            .flat_map(|rows| rows.values())
            .filter(|row| &row.shard == shard && up_to.is_none_or(|up| row.id <= up))
            .take(limit)
            .cloned()
            .collect()
    }

    /// A new fencing token, higher than every one before.
    fn next_fence(&mut self) -> FencingToken {
        self.fence += 1;
        FencingToken::new(self.fence)
    }

    fn grant(&mut self, request: &ClaimRequest, bucket: i32) {
        self.leases.insert(
            (request.kind, bucket),
            Lease {
                token: Some(request.token),
                lease_until: request.lease_until,
            },
        );
    }

    fn reschedule(
        &mut self,
        shard: &ShardKey,
        now: DateTime<Utc>,
        mut change: impl FnMut(DateTime<Utc>) -> Option<DateTime<Utc>>,
    ) {
        if let Some(rows) = self.rows.get_mut(&shard.kind()) {
            for row in rows.values_mut().filter(|row| &row.shard == shard) {
                if let Some(at) = change(row.scheduled_for) {
                    row.scheduled_for = at;
                    row.scheduled_from = now;
                }
            }
        }
    }
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

/// Rows written together: visible when [`commit`](Self::commit) is called,
/// gone when dropped without it. Ids are assigned at write time, as a
/// database sequence does, so a transaction that commits late can expose ids
/// lower than rows already delivered.
///
/// Like a database transaction, it can claim the shards it wrote before it
/// commits ([`ClaimBeforeCommit`]): their buckets are held for everyone else
/// while it is open, leased when it commits, free again when it is dropped.
#[derive(Debug)]
pub struct MemoryTransaction {
    store: MemoryStore,
    id: u64,
    rows: Vec<StoredRow>,
    /// Leases claimed before the commit.
    claims: Mutex<Vec<PendingLease>>,
}

/// A lease a [`MemoryTransaction`] claimed, taken when it commits.
#[derive(Clone, Copy, Debug)]
struct PendingLease {
    kind: OutboxKind,
    bucket: i32,
    token: i64,
    lease_until: DateTime<Utc>,
}

impl MemoryTransaction {
    /// Writes one row; returns its id. It stores the current span's trace
    /// context ([`TraceParent::current`](crate::trace::TraceParent::current)).
    pub fn write<C: Category>(
        &mut self,
        shard: &ShardKey,
        category: C,
        object_identifier: i64,
        payload: Option<Value>,
    ) -> i64 {
        self.write_raw(shard, category.value(), object_identifier, payload)
    }

    /// Writes one row with a raw category value (possibly unknown).
    pub fn write_raw(
        &mut self,
        shard: &ShardKey,
        category: i32,
        object_identifier: i64,
        payload: Option<Value>,
    ) -> i64 {
        self.write_versioned(shard, category, object_identifier, payload, None)
    }

    /// Writes one row of a typed category: its payload, and the version
    /// of the payload's contract (see [`crate::registry::contract`]).
    ///
    /// # Errors
    ///
    /// When the payload does not serialize to JSON; nothing is written.
    pub fn write_typed<K: TypedCategory>(
        &mut self,
        shard: &ShardKey,
        category: K,
        object_identifier: i64,
        payload: &K::Payload,
    ) -> Result<i64, serde_json::Error> {
        let (payload, version) = crate::registry::contract::encode(category, payload)?;
        Ok(self.write_versioned(
            shard,
            K::CATEGORY.value(),
            object_identifier,
            Some(payload),
            Some(version),
        ))
    }

    /// Writes one row as it is stored: a raw category value and payload
    /// version, as any writer (an older or newer binary, SQL by hand)
    /// might have stored them.
    pub fn write_versioned(
        &mut self,
        shard: &ShardKey,
        category: i32,
        object_identifier: i64,
        payload: Option<Value>,
        payload_version: Option<u32>,
    ) -> i64 {
        let row = self
            .store
            .new_row(shard, category, object_identifier, payload, payload_version);
        let id = row.id;
        self.rows.push(row);
        id
    }

    /// Makes the rows visible, and the leases claimed before it.
    pub fn commit(mut self) {
        let claims = std::mem::take(self.claims.get_mut().unwrap_or_else(|p| p.into_inner()));
        let mut state = self.store.lock();
        for row in std::mem::take(&mut self.rows) {
            state
                .rows
                .entry(row.shard.kind())
                .or_default()
                .insert(row.id, row);
        }
        for lease in claims {
            state.reserved.remove(&(lease.kind, lease.bucket));
            state.leases.insert(
                (lease.kind, lease.bucket),
                Lease {
                    token: Some(lease.token),
                    lease_until: lease.lease_until,
                },
            );
        }
    }
}

impl Drop for MemoryTransaction {
    /// Rolls back: the rows are gone, the buckets claimed are free again.
    fn drop(&mut self) {
        let id = self.id;
        self.store.lock().reserved.retain(|_, holder| *holder != id);
    }
}

#[async_trait]
impl ClaimBeforeCommit for MemoryTransaction {
    async fn claim_before_commit(
        &self,
        request: &ClaimRequest,
        shards: &[(ShardKey, i64)],
    ) -> Result<Vec<ShardClaim>, StoreError> {
        let mut state = self.store.lock();
        MemoryStore::check_failure(&mut state, "claim shards before a commit")?;
        let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        let fence = state.next_fence();
        let mut found = Vec::with_capacity(shards.len());
        for (shard, up_to) in shards {
            let shard_state = state.states.get(shard).cloned();
            if let Some(backoff) = shard_state.as_ref().filter(|s| s.retry_at > request.now) {
                found.push(ShardClaim::BackingOff(backoff.clone()));
                continue;
            }
            let key = (request.kind, shard.bucket());
            let mine = state.reserved.get(&key) == Some(&self.id);
            if !mine {
                if state.held(request.kind, shard.bucket(), request.now) {
                    found.push(ShardClaim::Held);
                    continue;
                }
                state.reserved.insert(key, self.id);
                claims.push(PendingLease {
                    kind: key.0,
                    bucket: key.1,
                    token: request.token,
                    lease_until: request.lease_until,
                });
            }
            // The committed rows and this transaction's own, in id order.
            let mut rows = state.shard_rows(shard, Some(*up_to), usize::MAX);
            rows.extend(
                self.rows
                    .iter()
                    .filter(|row| &row.shard == shard && row.id <= *up_to)
                    .cloned(),
            );
            rows.sort_by_key(|row| row.id);
            rows.truncate(request.rows);
            found.push(ShardClaim::Claimed(ClaimedShard {
                shard: shard.clone(),
                rows,
                state: shard_state,
                fence,
            }));
        }
        Ok(found)
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

    fn new_row(
        &self,
        shard: &ShardKey,
        category: i32,
        object_identifier: i64,
        payload: Option<Value>,
        payload_version: Option<u32>,
    ) -> StoredRow {
        let now = self.now();
        let mut state = self.lock();
        state.next_id += 1;
        StoredRow {
            id: state.next_id,
            message_id: uuid::Uuid::now_v7(),
            shard: shard.clone(),
            category,
            object_identifier,
            payload: payload.map(Payload::from),
            scheduled_from: now,
            scheduled_for: crate::schedule::due_at_once(),
            date_added: now,
            traceparent: crate::trace::TraceParent::current(),
            payload_version,
        }
    }

    /// Begins a group of writes that commits or rolls back as one.
    pub fn begin(&self) -> MemoryTransaction {
        let id = {
            let mut state = self.lock();
            state.next_transaction += 1;
            state.next_transaction
        };
        MemoryTransaction {
            store: self.clone(),
            id,
            rows: Vec::new(),
            claims: Mutex::new(Vec::new()),
        }
    }

    /// Writes one row, as a committed transaction would; returns its id.
    /// Like every write, it stores the current span's trace context
    /// ([`TraceParent::current`](crate::trace::TraceParent::current)).
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
        self.write_versioned(shard, category, object_identifier, payload, None)
    }

    /// Writes one row of a typed category, as a committed transaction
    /// would (see [`MemoryTransaction::write_typed`]).
    ///
    /// # Errors
    ///
    /// When the payload does not serialize to JSON; nothing is written.
    pub fn write_typed<K: TypedCategory>(
        &self,
        shard: &ShardKey,
        category: K,
        object_identifier: i64,
        payload: &K::Payload,
    ) -> Result<i64, serde_json::Error> {
        let mut txn = self.begin();
        let id = txn.write_typed(shard, category, object_identifier, payload)?;
        txn.commit();
        Ok(id)
    }

    /// Writes one row as stored, as a committed transaction would (see
    /// [`MemoryTransaction::write_versioned`]).
    pub fn write_versioned(
        &self,
        shard: &ShardKey,
        category: i32,
        object_identifier: i64,
        payload: Option<Value>,
        payload_version: Option<u32>,
    ) -> i64 {
        let mut txn = self.begin();
        let id = txn.write_versioned(shard, category, object_identifier, payload, payload_version);
        txn.commit();
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
}

#[async_trait]
impl DrainStore for MemoryStore {
    async fn claim_due(&self, request: &ClaimRequest) -> Result<DueClaim, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "claim due shards")?;
        let kind = request.kind;
        let mut due: Vec<&StoredRow> = state
            .rows
            .get(&kind)
            .into_iter()
            .flat_map(|rows| rows.values())
            .filter(|row| {
                row.scheduled_for <= request.now && request.up_to_id.is_none_or(|up| row.id <= up)
            })
            .collect();
        due.sort_by_key(|row| (row.scheduled_for, row.id));
        if request.order == ClaimOrder::Newest {
            due.reverse();
        }
        // A bounded scan, whatever is held; the window is its rows of free
        // buckets.
        due.truncate(request.scan_limit());
        let scanned = due.len();
        let window: Vec<&StoredRow> = due
            .into_iter()
            .filter(|row| !state.held(kind, row.shard.bucket(), request.now))
            .take(request.rows)
            .collect();
        // Buckets in the order the window met them, at most half of them;
        // shards likewise, with their rows in the window.
        let mut buckets: Vec<i32> = Vec::new();
        let mut shards: Vec<(ShardKey, usize)> = Vec::new();
        for row in &window {
            let bucket = row.shard.bucket();
            if !buckets.contains(&bucket) {
                if buckets.len() == MAX_BUCKETS_PER_CLAIM {
                    continue;
                }
                buckets.push(bucket);
            }
            match shards.iter_mut().find(|(shard, _)| shard == &row.shard) {
                Some((_, seen)) => *seen += 1,
                None => shards.push((row.shard.clone(), 1)),
            }
        }
        let deep = shards.iter().filter(|(_, seen)| *seen > 1).count();
        // A deep shard's share of the rows, when the window was full.
        let share = if window.len() >= request.rows {
            (request.rows + request.beyond) / deep.max(1)
        } else {
            0
        };
        let window = window.len();
        let fence = state.next_fence();
        for &bucket in &buckets {
            state.grant(request, bucket);
        }
        let shards = shards
            .into_iter()
            .map(|(shard, seen)| {
                let shard_state = state.states.get(&shard).cloned();
                // A backing-off shard's rows are read in id order, once it
                // may be tried again: its rescheduled rows sort after newer
                // due ones. Any other shard: its prefix, as deep as the
                // window saw it (or its share, when deep).
                let limit = match &shard_state {
                    Some(backoff) if backoff.retry_at > request.now => 0,
                    Some(_) => request.rows,
                    None if seen > 1 => seen.max(share),
                    None => seen,
                }
                .min(request.shard_rows);
                ClaimedShard {
                    rows: state.shard_rows(&shard, request.up_to_id, limit),
                    shard,
                    state: shard_state,
                    fence,
                }
            })
            .collect();
        Ok(DueClaim {
            shards,
            window,
            scanned,
        })
    }

    async fn claim_shard(
        &self,
        request: &ClaimRequest,
        shard: &ShardKey,
    ) -> Result<ShardClaim, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "claim a shard")?;
        let shard_state = state.states.get(shard).cloned();
        if let Some(backoff) = shard_state.as_ref() {
            if backoff.retry_at > request.now {
                return Ok(ShardClaim::BackingOff(backoff.clone()));
            }
        }
        if state.held(request.kind, shard.bucket(), request.now) {
            return Ok(ShardClaim::Held);
        }
        state.grant(request, shard.bucket());
        let fence = state.next_fence();
        Ok(ShardClaim::Claimed(ClaimedShard {
            shard: shard.clone(),
            rows: state.shard_rows(shard, request.up_to_id, request.rows),
            state: shard_state,
            fence,
        }))
    }

    async fn renew(
        &self,
        kind: OutboxKind,
        token: i64,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "renew claims")?;
        let mut renewed = 0;
        for ((lease_kind, _), lease) in &mut state.leases {
            if *lease_kind == kind && lease.live_for(token, now) {
                lease.lease_until = until;
                renewed += 1;
            }
        }
        Ok(renewed)
    }

    async fn commit(&self, batch: &CommitBatch) -> Result<CommitOutcome, StoreError> {
        let mut state = self.lock();
        Self::check_failure(&mut state, "commit a drain round")?;
        let kind = batch.kind;
        let owned = |state: &State, shard: &ShardKey| {
            state
                .leases
                .get(&(kind, shard.bucket()))
                .is_some_and(|lease| lease.live_for(batch.token, batch.now))
        };
        let mut outcome = CommitOutcome::default();
        for commit in &batch.shards {
            let shard = &commit.shard;
            if !owned(&state, shard) {
                outcome.lost.push(shard.clone());
                continue;
            }
            if let Some(rows) = state.rows.get_mut(&kind) {
                for id in &commit.delete_ids {
                    if rows.get(id).is_some_and(|row| &row.shard == shard) {
                        rows.remove(id);
                        outcome.deleted += 1;
                    }
                }
            }
            for dead in &commit.dead_letters {
                for id in &dead.ids {
                    let moved = state
                        .rows
                        .get_mut(&kind)
                        .filter(|rows| rows.get(id).is_some_and(|row| &row.shard == shard))
                        .and_then(|rows| rows.remove(id));
                    if let Some(row) = moved {
                        state.dead.entry(kind).or_default().insert(
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
            match &commit.end {
                ShardEnd::Done => {}
                ShardEnd::Recovered => {
                    state.states.remove(shard);
                    state.reschedule(shard, batch.now, |_| Some(crate::schedule::due_at_once()));
                }
                ShardEnd::Backoff {
                    retry_at,
                    delay,
                    error,
                    attempts,
                } => {
                    state.states.insert(
                        shard.clone(),
                        ShardState {
                            attempts: *attempts,
                            last_backoff: Some(*delay),
                            retry_at: *retry_at,
                            last_error: Some(error.clone()),
                            failed_at: batch.now,
                        },
                    );
                    state.reschedule(shard, batch.now, |_| Some(*retry_at));
                }
                ShardEnd::Wait { retry_at } => {
                    state.reschedule(shard, batch.now, |at| (at < *retry_at).then_some(*retry_at));
                }
            }
        }
        let kept: Vec<i32> = batch.in_flight.iter().map(ShardKey::bucket).collect();
        let touched: Vec<i32> = batch
            .shards
            .iter()
            .map(|commit| commit.shard.bucket())
            .chain(kept.iter().copied())
            .collect();
        for ((lease_kind, bucket), lease) in &mut state.leases {
            if *lease_kind != kind
                || !touched.contains(bucket)
                || !lease.live_for(batch.token, batch.now)
            {
                continue;
            }
            if kept.contains(bucket) {
                lease.lease_until = batch.renew_until;
            } else {
                lease.token = None;
                lease.lease_until = batch.now;
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
        for ((lease_kind, _), lease) in &mut state.leases {
            if *lease_kind == kind && lease.live_for(token, now) {
                lease.lease_until = now;
                expired += 1;
            }
        }
        Ok(expired)
    }
}
