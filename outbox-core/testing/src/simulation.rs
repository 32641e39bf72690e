//! Deterministic simulation of the drain.
//!
//! One *schedule* is a seeded sequence of steps over a [`MemoryStore`] and a
//! [`ManualClock`], on a single-threaded tokio runtime with paused time, so
//! that a seed replays exactly: producers commit or roll back writes; up to
//! three workers run rounds at once, their store operations interleaved by
//! seeded yields; a worker may crash before or after any of its store
//! operations (its round is dropped where it stands; as a process death,
//! its claims then end only with their lease, or as a cancellation, released
//! early); synchronous flushes race the rounds; receivers fail, fail
//! permanently or panic on demand; the clock jumps, past leases and
//! backoffs; an operator releases quarantined shards; a worker's process
//! pauses past its lease in the middle of a receiver's call (after its
//! lease check, before the receiver's write), and meanwhile another
//! process's worker runs a round, which may claim the shard and deliver
//! its newer rows first.
//!
//! The receiver is fenced, as rule 12 asks of one: it keeps the highest
//! fencing token it applied per shard and refuses a lower one as
//! superseded (counted in [`SimOutcome::superseded`]).
//!
//! After every step the simulator checks the outbox's rules (numbered as in `conformance`) that
//! can be seen from outside: no committed row is lost and no rolled-back row
//! is delivered (rules 1, 2, 6), a delivery carries the payload of the row it
//! names (4), no shard is delivered by two workers at once (3), what the
//! receiver applied of a shard goes forward: within one claim in order of
//! the groups' lowest ids (3), never a claim's after a newer claim's (12),
//! stalled workers' and synchronous deliveries included, a failing shard is not delivered before its backoff ends, a quarantined
//! one not before an operator releases it (5). At the end, with faults
//! stopped, everything drains. The first broken rule ends the schedule with
//! a [`Violation`] that names the seed: `run(seed, &config)` replays it.
//!
//! `tests/simulation.rs` runs 10,000 schedules (`OUTBOX_SIM_SEED=<seed>`
//! replays one, `OUTBOX_SIM_TRACE=1` prints its steps as they run);
//! `cargo run --release -p outbox-testing --example simulate` runs 100,000
//! and prints the rate.
//!
//! A planted bug is caught: with the fencing check of `MemoryStore::commit`
//! removed, seed 6 breaks rule 7 (a commit whose lease had ended changed
//! its shard) within its 40 steps. With an unfenced receiver
//! ([`SimConfig::fenced`] `false`), a quarter of the schedules break rule
//! 12 (a stalled worker puts an old state back).
//!
//! The pause moves the engine's clock, not tokio's: advancing tokio's
//! paused clock makes its timers fire in an order that differs from one
//! process to the next, and a seed would no longer replay (an earlier
//! variant that did so reported a redelivery that could not be replayed).

// A simulator: a broken expectation is a violation or a panic by design.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use tokio::sync::Notify;

use outbox_core::backoff::BackoffPolicy;
use outbox_core::clock::{Clock, ManualClock};
use outbox_core::drain::{DeadLetterPolicy, DrainConfig, Drainer};
use outbox_core::fence::FencingToken;
use outbox_core::memory::MemoryStore;
use outbox_core::message::Message;
use outbox_core::receiver::{HandlerError, Receivers};
use outbox_core::registry::{Category, Scope};
use outbox_core::shard::{OutboxKind, ShardKey};
use outbox_core::store::{
    ClaimRequest, CommitBatch, CommitOutcome, DeadLetterRow, DrainStore, DueClaim, FailingShard,
    ShardClaim, ShardDepth, StoreAdmin, StoreError,
};

outbox_core::registry! {
    /// Retries forever; a permanent error quarantines its shard.
    SimOrgScope = 0 {
        /// An organization update.
        SimOrgUpdate = 1,
        /// A membership update.
        SimMemberUpdate = 2,
    }
    /// Dead-letters after two attempts, and at once on a permanent error.
    SimAuditScope = 1 {
        /// An audit event.
        SimAuditEvent = 10,
    }
}

/// The size of a schedule.
#[derive(Clone, Copy, Debug)]
pub struct SimConfig {
    /// Steps per schedule.
    pub steps: usize,
    /// Workers (drainers with claims of their own), at most this many at once.
    pub workers: usize,
    /// Shards per scope.
    pub shards: i64,
    /// Objects per shard (coalescing groups).
    pub objects: i64,
    /// Whether the receiver is fenced: it keeps the highest fencing token it
    /// applied per shard and refuses a lower one as superseded (rule 12).
    /// `false` shows what fencing prevents: a stalled worker's late
    /// delivery is applied after a newer claim's, and the check finds it.
    pub fenced: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            steps: 40,
            workers: 3,
            shards: 3,
            objects: 2,
            fenced: true,
        }
    }
}

/// What a passing schedule did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimOutcome {
    /// Steps run.
    pub steps: usize,
    /// Deliveries seen.
    pub deliveries: usize,
    /// Worker crashes.
    pub crashes: usize,
    /// Deliveries the fenced receiver refused as superseded (stalled
    /// workers' late ones).
    pub superseded: usize,
    /// One line per step: equal traces for equal seeds.
    pub trace: Vec<String>,
}

/// A broken rule.
#[derive(Clone, Debug)]
pub struct Violation {
    /// The schedule's seed: `run(seed, &config)` replays it.
    pub seed: u64,
    /// The step after which the rule was broken.
    pub step: usize,
    /// Which rule.
    pub rule: &'static str,
    /// What was seen.
    pub detail: String,
    /// The steps up to it.
    pub trace: Vec<String>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "rule broken: {} after step {} of seed {} (replay: outbox_testing::simulation::run({}, &config))",
            self.rule, self.step, self.seed, self.seed
        )?;
        writeln!(f, "  {}", self.detail)?;
        for (n, line) in self.trace.iter().enumerate() {
            writeln!(f, "  {n:>3}. {line}")?;
        }
        Ok(())
    }
}

/// SplitMix64: small, fast, and the same everywhere.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where a worker dies: before or after its n-th store operation.
#[derive(Clone, Copy, Debug)]
struct CrashPoint {
    op: usize,
    after: bool,
}

/// What the store wrappers share: the seeded yields and the crash plans.
#[derive(Default)]
struct Control {
    rng: Mutex<Option<Rng>>,
    /// Per worker: its crash point and store operations so far.
    plans: Mutex<HashMap<usize, (Option<CrashPoint>, usize)>>,
    crashed: Mutex<HashSet<usize>>,
    crash: Notify,
    /// Commits that changed a shard whose lease they had lost (rule 7).
    unfenced: Mutex<Vec<String>>,
}

impl Control {
    fn yields(&self) -> u64 {
        lock(&self.rng).as_mut().map_or(0, |rng| rng.below(3))
    }

    /// Whether worker `id` dies at this point of its next operation.
    fn dies(&self, id: usize, after: bool) -> bool {
        let mut plans = lock(&self.plans);
        let Some((Some(point), count)) = plans.get_mut(&id) else {
            return false;
        };
        if point.after != after || point.op != *count {
            return false;
        }
        drop(plans);
        lock(&self.crashed).insert(id);
        self.crash.notify_waiters();
        true
    }

    fn count(&self, id: usize) {
        if let Some((_, count)) = lock(&self.plans).get_mut(&id) {
            *count += 1;
        }
    }
}

/// A worker's view of the shared store: yields before each operation and
/// dies where its plan says.
#[derive(Clone)]
struct SimStore {
    inner: MemoryStore,
    control: Arc<Control>,
    worker: usize,
}

impl SimStore {
    async fn op<T, F>(&self, call: F) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>> + Send,
    {
        for _ in 0..self.control.yields() {
            tokio::task::yield_now().await;
        }
        if self.control.dies(self.worker, false) {
            std::future::pending::<()>().await;
        }
        let result = call.await;
        if self.control.dies(self.worker, true) {
            std::future::pending::<()>().await;
        }
        self.control.count(self.worker);
        result
    }
}

#[async_trait]
impl DrainStore for SimStore {
    async fn claim_due(&self, request: &ClaimRequest) -> Result<DueClaim, StoreError> {
        self.op(self.inner.claim_due(request)).await
    }

    async fn claim_shard(
        &self,
        request: &ClaimRequest,
        shard: &ShardKey,
    ) -> Result<ShardClaim, StoreError> {
        self.op(self.inner.claim_shard(request, shard)).await
    }

    async fn renew(
        &self,
        kind: OutboxKind,
        token: i64,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        self.op(self.inner.renew(kind, token, now, until)).await
    }

    async fn commit(&self, batch: &CommitBatch) -> Result<CommitOutcome, StoreError> {
        // The store as the commit found and left it, read right around it
        // (the memory store does not yield): another worker's commit while
        // this one waits (the shard's new owner) is not counted as its.
        let inner = &self.inner;
        let ids = || -> HashSet<i64> { inner.rows(batch.kind).iter().map(|row| row.id).collect() };
        let (outcome, before, after, states_before, states_after) = self
            .op(async {
                let before = ids();
                let states_before = inner.failing_shards(batch.kind, 10_000).await?;
                let outcome = inner.commit(batch).await?;
                let after = ids();
                let states_after = inner.failing_shards(batch.kind, 10_000).await?;
                Ok((outcome, before, after, states_before, states_after))
            })
            .await?;
        // Rule 7: a shard whose lease was lost is left exactly as it was.
        for shard in &outcome.lost {
            let Some(commit) = batch.shards.iter().find(|c| &c.shard == shard) else {
                continue;
            };
            let touched = commit
                .delete_ids
                .iter()
                .chain(commit.dead_letters.iter().flat_map(|d| d.ids.iter()))
                .any(|id| before.contains(id) && !after.contains(id));
            let state = |states: &[FailingShard]| {
                states
                    .iter()
                    .find(|f| &f.shard == shard)
                    .map(|f| f.state.clone())
            };
            if touched || state(&states_before) != state(&states_after) {
                lock(&self.control.unfenced).push(format!(
                    "a commit whose lease on {shard} had ended changed it"
                ));
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
        self.op(self.inner.expire_claims(kind, token, now)).await
    }
}

#[async_trait]
impl StoreAdmin for SimStore {
    async fn pending_count(&self, kind: OutboxKind) -> Result<u64, StoreError> {
        self.inner.pending_count(kind).await
    }
    async fn shard_depths(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<ShardDepth>, StoreError> {
        self.inner.shard_depths(kind, limit).await
    }
    async fn oldest_pending(&self, kind: OutboxKind) -> Result<Option<DateTime<Utc>>, StoreError> {
        self.inner.oldest_pending(kind).await
    }
    async fn max_id(&self, kind: OutboxKind) -> Result<Option<i64>, StoreError> {
        self.inner.max_id(kind).await
    }
    async fn has_due(&self, kind: OutboxKind, now: DateTime<Utc>) -> Result<bool, StoreError> {
        self.inner.has_due(kind, now).await
    }
    async fn failing_shards(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<FailingShard>, StoreError> {
        self.inner.failing_shards(kind, limit).await
    }
    async fn parked_shards(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<FailingShard>, StoreError> {
        self.inner.parked_shards(kind, limit).await
    }
    async fn dead_letters(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<DeadLetterRow>, StoreError> {
        self.inner.dead_letters(kind, limit).await
    }
    async fn replay_dead_letters(&self, kind: OutboxKind, ids: &[i64]) -> Result<u64, StoreError> {
        self.inner.replay_dead_letters(kind, ids).await
    }
    async fn retry_now(
        &self,
        shards: &[ShardKey],
        now: DateTime<Utc>,
    ) -> Result<Vec<ShardKey>, StoreError> {
        self.inner.retry_now(shards, now).await
    }

    async fn discard_dead_letters(&self, kind: OutboxKind, ids: &[i64]) -> Result<u64, StoreError> {
        self.inner.discard_dead_letters(kind, ids).await
    }

    async fn snapshot(
        &self,
        kind: OutboxKind,
        limit: usize,
        cap: u64,
    ) -> Result<outbox_core::store::AdminSnapshot, StoreError> {
        self.inner.snapshot(kind, limit, cap).await
    }

    async fn table_health(
        &self,
        kind: OutboxKind,
    ) -> Result<outbox_core::store::TableHealth, StoreError> {
        self.inner.table_health(kind).await
    }

    async fn controls(&self) -> Result<Vec<outbox_core::control::RuntimeControl>, StoreError> {
        self.inner.controls().await
    }

    async fn set_control(
        &self,
        control: &outbox_core::control::RuntimeControl,
    ) -> Result<(), StoreError> {
        self.inner.set_control(control).await
    }

    async fn clear_control(
        &self,
        target: &outbox_core::control::ControlTarget,
    ) -> Result<bool, StoreError> {
        self.inner.clear_control(target).await
    }
    async fn record_audit(
        &self,
        entry: &outbox_core::audit::AuditEntry,
        keep_after: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.inner.record_audit(entry, keep_after).await
    }
    async fn audit_log(
        &self,
        limit: usize,
    ) -> Result<Vec<outbox_core::audit::AuditRecord>, StoreError> {
        self.inner.audit_log(limit).await
    }
    async fn shard_head(
        &self,
        shard: &ShardKey,
        limit: usize,
    ) -> Result<Vec<outbox_core::message::StoredRow>, StoreError> {
        self.inner.shard_head(shard, limit).await
    }
    async fn set_aside(
        &self,
        shard: &ShardKey,
        ids: &[i64],
        error: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<u64>, StoreError> {
        self.inner.set_aside(shard, ids, error, now).await
    }
    async fn record_history(
        &self,
        samples: &[outbox_core::history::Sample],
        keep_after: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.inner.record_history(samples, keep_after).await
    }
    async fn history(
        &self,
        kind: OutboxKind,
        since: DateTime<Utc>,
    ) -> Result<Vec<outbox_core::history::Sample>, StoreError> {
        self.inner.history(kind, since).await
    }
}

/// What the next delivery of a shard does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Fail,
    Permanent,
    Panic,
    /// The worker stalls past its lease (a long pause) mid-delivery.
    Stall,
}

#[derive(Clone, Debug)]
struct Seen {
    shard: ShardKey,
    id: i64,
    first_id: i64,
    payload: Option<Value>,
    at: DateTime<Utc>,
    /// The claim's fencing token.
    fence: FencingToken,
}

/// The receivers' side: what was delivered, what to do next.
struct Receiver {
    clock: ManualClock,
    seen: Mutex<Vec<Seen>>,
    faults: Mutex<HashMap<ShardKey, Fault>>,
    active: Mutex<HashSet<ShardKey>>,
    overlaps: Mutex<Vec<ShardKey>>,
    /// Whether it refuses superseded deliveries.
    fenced: bool,
    /// The highest fencing token applied per shard.
    highest: Mutex<HashMap<ShardKey, FencingToken>>,
    /// Another process's worker, which runs a round while a stalled one is
    /// paused (taken out at the end of the schedule: it holds the receiver).
    relief: Mutex<Option<Drainer<OutboxCategory>>>,
    /// Whether the relief is running (a stall inside it does not recurse).
    relieving: std::sync::atomic::AtomicBool,
    /// Deliveries refused as superseded.
    superseded: std::sync::atomic::AtomicUsize,
}

struct Active<'a>(&'a Receiver, ShardKey);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        lock(&self.0.active).remove(&self.1);
    }
}

impl Receiver {
    async fn handle(&self, message: Message<OutboxCategory>) -> Result<(), HandlerError> {
        if !lock(&self.active).insert(message.shard.clone()) {
            lock(&self.overlaps).push(message.shard.clone());
        }
        let _active = Active(self, message.shard.clone());
        tokio::task::yield_now().await;
        let fault = lock(&self.faults).remove(&message.shard);
        match fault {
            Some(Fault::Stall) => {
                // The process pauses past its lease between its lease
                // check and this receiver's write: another worker may take
                // the shard and deliver newer rows meanwhile, and only the
                // token can refuse what follows. (The engine's clock jumps;
                // tokio's does not: its timer wheel would fire in an order
                // that differs between processes, and a seed would no
                // longer replay. The lease check before each call reads
                // the engine's clock.)
                drop(_active);
                self.clock.advance(Duration::from_secs(4));
                for _ in 0..8 {
                    tokio::task::yield_now().await;
                }
                // Meanwhile another process drains: it may claim this
                // shard (its lease has ended) and deliver its newer rows.
                let relief = lock(&self.relief).clone();
                if let Some(relief) = relief {
                    if !self
                        .relieving
                        .swap(true, std::sync::atomic::Ordering::SeqCst)
                    {
                        let _ = relief.drain_due(OutboxKind::Region).await;
                        self.relieving
                            .store(false, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            }
            Some(Fault::Fail) => return Err("simulated failure".into()),
            Some(Fault::Permanent) => return Err(outbox_core::permanent("simulated rejection")),
            Some(Fault::Panic) => panic!("simulated receiver panic"),
            None => {}
        }
        if self.fenced {
            // Rule 12: the check and the write are one step (a database
            // receiver does both in one transaction).
            let mut highest = lock(&self.highest);
            let applied = highest.entry(message.shard.clone()).or_default();
            if message.fence < *applied {
                self.superseded
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                return Ok(());
            }
            *applied = message.fence;
        }
        let now = self.clock.now();
        lock(&self.seen).push(Seen {
            shard: message.shard.clone(),
            id: message.id,
            first_id: message.first_id,
            payload: message
                .payload
                .as_ref()
                .map(outbox_core::Payload::to_value_or_text),
            at: now,
            fence: message.fence,
        });
        Ok(())
    }
}

/// What was written.
struct Written {
    shard: ShardKey,
    group: (i32, i64),
    payload: Value,
}

/// One schedule's world.
struct World {
    seed: u64,
    config: SimConfig,
    rng: Rng,
    clock: ManualClock,
    store: MemoryStore,
    control: Arc<Control>,
    receiver: Arc<Receiver>,
    workers: Vec<Drainer<OutboxCategory>>,
    /// The store-wrapper id of each worker (a restarted one gets a new id).
    worker_ids: Vec<usize>,
    committed: BTreeMap<i64, Written>,
    rolled_back: HashSet<i64>,
    /// When each shard may be delivered again (failures and quarantines).
    retry_after: HashMap<ShardKey, DateTime<Utc>>,
    checked: usize,
    /// The fencing token and first id of each shard's last applied delivery.
    last_applied: HashMap<ShardKey, (FencingToken, i64)>,
    trace: Vec<String>,
    crashes: usize,
    next_worker: usize,
}

fn drain_config() -> DrainConfig {
    DrainConfig::default()
        .batch_size(4)
        .concurrency(2)
        .lease(Duration::from_secs(3))
        .backoff(BackoffPolicy::new(
            Duration::from_secs(1),
            Duration::from_secs(60),
        ))
        // Rule 5 as such: no early retry when a receiver comes back.
        .recovery_batch(0)
}

impl World {
    fn new(seed: u64, config: SimConfig) -> Self {
        let clock =
            ManualClock::new(outbox_core::store::due_at_once() + chrono::Duration::days(3650));
        let store = MemoryStore::new().with_clock(clock.clone());
        let control = Arc::new(Control {
            rng: Mutex::new(Some(Rng(seed ^ 0xA5A5_A5A5))),
            ..Control::default()
        });
        let mut world = Self {
            seed,
            config,
            rng: Rng(seed),
            clock: clock.clone(),
            store,
            control,
            receiver: Arc::new(Receiver {
                clock: clock.clone(),
                seen: Mutex::default(),
                faults: Mutex::default(),
                active: Mutex::default(),
                overlaps: Mutex::default(),
                fenced: config.fenced,
                highest: Mutex::default(),
                relief: Mutex::default(),
                relieving: std::sync::atomic::AtomicBool::new(false),
                superseded: std::sync::atomic::AtomicUsize::new(0),
            }),
            workers: Vec::new(),
            worker_ids: Vec::new(),
            committed: BTreeMap::new(),
            rolled_back: HashSet::new(),
            retry_after: HashMap::new(),
            checked: 0,
            last_applied: HashMap::new(),
            trace: Vec::new(),
            crashes: 0,
            next_worker: 0,
        };
        for _ in 0..config.workers.max(1) {
            let (worker, id) = world.new_worker();
            world.workers.push(worker);
            world.worker_ids.push(id);
        }
        let (relief, _) = world.new_worker();
        *lock(&world.receiver.relief) = Some(relief);
        world
    }

    /// A new worker process: its own claims and owner name.
    fn new_worker(&mut self) -> (Drainer<OutboxCategory>, usize) {
        let id = self.next_worker;
        self.next_worker += 1;
        let store = SimStore {
            inner: self.store.clone(),
            control: self.control.clone(),
            worker: id,
        };
        let mut receivers = Receivers::new();
        for &category in OutboxCategory::ALL {
            let receiver = self.receiver.clone();
            receivers.register(category, move |message: Message<OutboxCategory>| {
                let receiver = receiver.clone();
                async move { receiver.handle(message).await }
            });
        }
        lock(&self.control.plans).insert(id, (None, 0));
        let drainer = Drainer::builder(store, receivers)
            .clock(self.clock.clone())
            .config(drain_config())
            .dead_letters(DeadLetterPolicy::new().after(OutboxScope::SimAuditScope, 2))
            .build();
        (drainer, id)
    }

    fn shard(&mut self) -> ShardKey {
        let identifier = i64::try_from(self.rng.below(self.config.shards as u64)).unwrap_or(0);
        if self.rng.chance(25) {
            ShardKey::region(OutboxScope::SimAuditScope, identifier)
        } else {
            ShardKey::region(OutboxScope::SimOrgScope, identifier)
        }
    }

    fn violation(&self, rule: &'static str, detail: String) -> Violation {
        Violation {
            seed: self.seed,
            step: self.trace.len(),
            rule,
            detail,
            trace: self.trace.clone(),
        }
    }

    fn write(&mut self, commit: bool) {
        let mut transaction = self.store.begin();
        let count = 1 + self.rng.below(3);
        let mut ids = Vec::new();
        for _ in 0..count {
            let shard = self.shard();
            let category = if shard.scope() == OutboxScope::SimAuditScope.value() {
                OutboxCategory::SimAuditEvent
            } else if self.rng.chance(50) {
                OutboxCategory::SimOrgUpdate
            } else {
                OutboxCategory::SimMemberUpdate
            };
            let object = i64::try_from(self.rng.below(self.config.objects as u64)).unwrap_or(0);
            let payload = json!({ "n": self.committed.len() + self.rolled_back.len() + ids.len() });
            let id = transaction.write(&shard, category, object, Some(payload.clone()));
            ids.push((
                id,
                Written {
                    shard,
                    group: (category.value(), object),
                    payload,
                },
            ));
        }
        if commit {
            transaction.commit();
            self.trace.push(format!(
                "commit {:?}",
                ids.iter()
                    .map(|(id, w)| (id, w.shard.identifier()))
                    .collect::<Vec<_>>()
            ));
            self.committed.extend(ids);
        } else {
            drop(transaction);
            self.trace.push(format!(
                "roll back {:?}",
                ids.iter().map(|(id, _)| id).collect::<Vec<_>>()
            ));
            self.rolled_back.extend(ids.into_iter().map(|(id, _)| id));
        }
    }

    /// Rounds of some workers at once, and maybe a flush; some die.
    async fn race(&mut self) {
        let n = 1 + self.rng.below(self.workers.len() as u64) as usize;
        let first = self.rng.below(self.workers.len() as u64) as usize;
        let chosen: Vec<usize> = (0..n).map(|k| (first + k) % self.workers.len()).collect();
        let flush = self.rng.chance(40).then(|| self.shard());
        let mut plans = Vec::new();
        for &index in &chosen {
            let id = self.worker_ids[index];
            let point = self.rng.chance(25).then(|| CrashPoint {
                op: self.rng.below(4) as usize,
                after: self.rng.chance(50),
            });
            lock(&self.control.plans).insert(id, (point, 0));
            plans.push((index, id, point));
        }
        lock(&self.control.crashed).clear();
        type Run<'a> = Pin<Box<dyn Future<Output = (usize, bool)> + 'a>>;
        let mut runs: Vec<Run<'_>> = Vec::new();
        for (k, &(index, id, _)) in plans.iter().enumerate() {
            let drainer = self.workers[index].clone();
            let control = self.control.clone();
            let flush = if k == 0 { flush.clone() } else { None };
            runs.push(Box::pin(async move {
                let work = async {
                    if let Some(shard) = &flush {
                        let _ = drainer.drain_shard(shard, None).await;
                    } else {
                        let _ = drainer.drain_due(OutboxKind::Region).await;
                    }
                };
                let died = async {
                    loop {
                        let notified = control.crash.notified();
                        if lock(&control.crashed).contains(&id) {
                            return;
                        }
                        notified.await;
                    }
                };
                tokio::select! {
                    biased;
                    () = died => (index, true),
                    () = work => (index, false),
                }
            }));
        }
        if std::env::var_os("OUTBOX_SIM_TRACE").is_some() {
            eprintln!("  racing {chosen:?} plans {plans:?} flush {flush:?}");
        }
        let results = futures::future::join_all(runs).await;
        // The crash points are spent: what follows runs to its end.
        for (_, id, _) in &plans {
            if let Some(plan) = lock(&self.control.plans).get_mut(id) {
                plan.0 = None;
            }
        }
        let mut line = format!(
            "race of workers {chosen:?}{}:",
            flush
                .map(|s| format!(", the first flushing {s}"))
                .unwrap_or_default()
        );
        for (index, died) in results {
            if died {
                self.crashes += 1;
                if self.rng.chance(50) {
                    // A process death: its claims end with their lease.
                    let (worker, id) = self.new_worker();
                    self.workers[index] = worker;
                    self.worker_ids[index] = id;
                    line.push_str(&format!(" w{index} killed;"));
                } else {
                    let _ = self.workers[index].release_abandoned().await;
                    line.push_str(&format!(" w{index} cancelled;"));
                }
            }
        }
        self.trace.push(line);
    }

    async fn step(&mut self) {
        match self.rng.below(100) {
            0..=29 => self.write(true),
            30..=34 => self.write(false),
            35..=69 => self.race().await,
            70..=77 => {
                let shard = self.shard();
                let fault = match self.rng.below(12) {
                    0..=4 => Fault::Fail,
                    5..=7 => Fault::Permanent,
                    8..=9 => Fault::Stall,
                    _ => Fault::Panic,
                };
                self.trace
                    .push(format!("next delivery of {} {fault:?}", shard.identifier()));
                lock(&self.receiver.faults).insert(shard, fault);
            }
            78..=91 => {
                let millis = match self.rng.below(10) {
                    0..=5 => self.rng.below(2_000),
                    6..=8 => 3_000 + self.rng.below(5_000),
                    _ => self.rng.below(7_200_000),
                };
                self.clock.advance(Duration::from_millis(millis));
                if millis >= 3_000 {
                    // Leases may have ended: redelivery is allowed.
                }
                self.trace.push(format!("advance {millis} ms"));
            }
            _ => {
                let released = self.release_quarantined().await;
                self.trace.push(format!(
                    "operator releases {:?}",
                    released
                        .iter()
                        .map(ShardKey::identifier)
                        .collect::<Vec<_>>()
                ));
            }
        }
    }

    /// An operator releases every quarantined shard (`retry_now`).
    async fn release_quarantined(&mut self) -> Vec<ShardKey> {
        let quarantined: Vec<ShardKey> = self
            .store
            .failing_shards(OutboxKind::Region, 1_000)
            .await
            .unwrap()
            .into_iter()
            .filter(|f| f.state.is_quarantined())
            .map(|f| f.shard)
            .collect();
        let released = self
            .store
            .retry_now(&quarantined, self.clock.now())
            .await
            .unwrap();
        for shard in &released {
            self.retry_after.remove(shard);
        }
        released
    }

    /// Records backoffs and quarantines from the store, and checks the rules.
    async fn check(&mut self) -> Result<(), Violation> {
        let now = self.clock.now();
        // Failures since the last check: backoff and order may restart.
        for failing in self
            .store
            .failing_shards(OutboxKind::Region, 1_000)
            .await
            .unwrap()
        {
            let previous = self
                .retry_after
                .insert(failing.shard.clone(), failing.state.retry_at);
            if previous != Some(failing.state.retry_at) {}
        }
        let unfenced = lock(&self.control.unfenced).clone();
        if let Some(what) = unfenced.first() {
            return Err(self.violation("7: fencing", what.clone()));
        }
        let overlaps = lock(&self.receiver.overlaps).clone();
        if let Some(shard) = overlaps.first() {
            return Err(self.violation(
                "3: one worker per shard",
                format!("shard {shard} delivered by two workers at once"),
            ));
        }
        let seen = lock(&self.receiver.seen).clone();
        for delivery in &seen[self.checked..] {
            if self.rolled_back.contains(&delivery.id) {
                return Err(self.violation(
                    "1: no phantom rows",
                    format!("rolled-back row {} delivered", delivery.id),
                ));
            }
            let Some(written) = self.committed.get(&delivery.id) else {
                return Err(self.violation(
                    "1: no phantom rows",
                    format!("unknown row {} delivered", delivery.id),
                ));
            };
            if Some(&written.payload) != delivery.payload.as_ref()
                || delivery.first_id > delivery.id
            {
                return Err(self.violation(
                    "4: coalescing",
                    format!("delivery {delivery:?} does not match its row"),
                ));
            }
            if let Some(at) = self.retry_after.get(&delivery.shard) {
                if delivery.at < *at {
                    return Err(self.violation(
                        "5: backoff",
                        format!(
                            "shard {} delivered at {} before {at}",
                            delivery.shard, delivery.at
                        ),
                    ));
                }
            }
            // Rules 3 and 12, as the receiver saw what it applied: one
            // claim's deliveries of a shard go forward; a later claim
            // (higher token) may start again lower (a redelivery after a
            // crash, a failure or a lost lease: rule 6); an older claim's
            // delivery after a newer one's (a stalled worker's) is never
            // applied.
            let current = (delivery.fence, delivery.first_id);
            if let Some(&(fence, first_id)) = self.last_applied.get(&delivery.shard) {
                if delivery.fence < fence {
                    return Err(self.violation(
                        "12: fencing",
                        format!(
                            "shard {} applied a delivery of claim {} after one of claim {fence}: \
                             a stale worker put an old state back",
                            delivery.shard, delivery.fence
                        ),
                    ));
                }
                if delivery.fence == fence && delivery.first_id <= first_id {
                    return Err(self.violation(
                        "3: order",
                        format!(
                            "shard {} went back from {first_id} to {} within claim {fence}",
                            delivery.shard, delivery.first_id
                        ),
                    ));
                }
            }
            self.last_applied.insert(delivery.shard.clone(), current);
        }
        self.checked = seen.len();
        // Rules 2 and 6: every committed row is pending, delivered (by a
        // delivery of its group at or after it) or dead-lettered.
        let pending: HashSet<i64> = self
            .store
            .rows(OutboxKind::Region)
            .iter()
            .map(|r| r.id)
            .collect();
        let dead: HashSet<i64> = self
            .store
            .dead_letters(OutboxKind::Region, 100_000)
            .await
            .unwrap()
            .iter()
            .map(|d| d.row.id)
            .collect();
        for (id, written) in &self.committed {
            if pending.contains(id) || dead.contains(id) {
                continue;
            }
            let covered = seen.iter().any(|s| {
                s.shard == written.shard
                    && self
                        .committed
                        .get(&s.id)
                        .is_some_and(|w| w.group == written.group)
                    && s.id >= *id
            });
            if !covered {
                return Err(self.violation(
                    "2: no loss",
                    format!("row {id} is gone but was never delivered"),
                ));
            }
        }
        let _ = now;
        Ok(())
    }

    /// Faults stop; time passes; everything must drain.
    async fn settle(&mut self) -> Result<(), Violation> {
        lock(&self.receiver.faults).clear();
        for _ in 0..40 {
            if self.store.pending_count(OutboxKind::Region).await.unwrap() == 0 {
                return self.check().await;
            }
            self.clock.advance(Duration::from_secs(120));
            self.release_quarantined().await;
            let _ = self.workers[0].drain_due(OutboxKind::Region).await;
            self.check().await?;
        }
        let left = self.store.pending_count(OutboxKind::Region).await.unwrap();
        Err(self.violation(
            "2: no loss",
            format!("{left} rows never drained after the faults stopped"),
        ))
    }
}

/// Installs a panic hook that stays quiet for the receivers' simulated
/// panics (they are caught by the drain) and reports every other panic as
/// before.
pub fn quiet_simulated_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let simulated = info
            .payload()
            .downcast_ref::<&str>()
            .is_some_and(|message| message.starts_with("simulated"));
        if !simulated {
            default(info);
        }
    }));
}

/// Runs the schedule of `seed`.
///
/// # Errors
///
/// The first rule it breaks.
pub fn run(seed: u64, config: &SimConfig) -> Result<SimOutcome, Violation> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let config = *config;
    runtime.block_on(async move {
        let mut world = World::new(seed, config);
        let verbose = std::env::var_os("OUTBOX_SIM_TRACE").is_some();
        let schedule = async {
            for _ in 0..config.steps {
                world.step().await;
                if verbose {
                    eprintln!("{}", world.trace.last().map_or("", String::as_str));
                }
                world.check().await?;
            }
            world.settle().await
        }
        .await;
        // The relief holds the receiver, which holds the relief.
        lock(&world.receiver.relief).take();
        schedule?;
        let deliveries = lock(&world.receiver.seen).len();
        Ok(SimOutcome {
            steps: config.steps,
            deliveries,
            crashes: world.crashes,
            superseded: world
                .receiver
                .superseded
                .load(std::sync::atomic::Ordering::SeqCst),
            trace: std::mem::take(&mut world.trace),
        })
    })
}
