use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::oneshot;

use super::abandoned::Abandoned;
use super::complete::{Completer, CompleterParts};
use super::config::DrainConfig;
use super::observe;
use super::planner::ClaimPlanner;
use super::recovery::Recovery;
use super::report::DrainReport;
use super::round::Round;
use crate::clock::{Clock, SystemClock};
use crate::control::{ControlAction, ControlTarget, Controls, RuntimeControl};
use crate::receiver::Receivers;
use crate::registry::{Category, Scope};
use crate::shard::{OutboxKind, ShardKey};
use crate::store::{DrainStore, Store, StoreAdmin, StoreError};

tokio::task_local! {
    /// Shards being delivered further up this task's call stack.
    pub(crate) static DELIVERING: Arc<Vec<ShardKey>>;
}

/// Delivers outbox messages from a store to [`Receivers`].
///
/// Cheap to clone; clones share the store, receivers, clock and the cache of
/// runtime controls.
/// See the [module documentation](crate::drain) for how a round works.
pub struct Drainer<C: Category> {
    store: Arc<dyn DrainStore>,
    admin: Arc<dyn StoreAdmin>,
    receivers: Arc<Receivers<C>>,
    config: DrainConfig,
    controls: Controls,
    clock: Arc<dyn Clock>,
    owner: Arc<str>,
    dead_letter_after: Arc<DeadLetterPolicy>,
    abandoned: Arc<Abandoned>,
    planner: Arc<ClaimPlanner>,
    recovery: Arc<Recovery>,
    completer: Arc<Completer>,
}

/// Which scopes give up on a failing group, and after how many attempts.
/// Scopes not named retry forever (Sentry's behaviour, the default).
///
/// ```
/// # outbox_core::registry! { AuditScope = 0 { AuditEvent = 1 } }
/// use outbox_core::DeadLetterPolicy;
/// let policy = DeadLetterPolicy::new().after(OutboxScope::AuditScope, 5);
/// assert_eq!(policy.attempts_for(OutboxScope::AuditScope.into()), Some(5));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeadLetterPolicy {
    attempts: HashMap<i32, u32>,
}

impl DeadLetterPolicy {
    /// Every scope retries forever.
    pub fn new() -> Self {
        Self::default()
    }

    /// `scope` dead-letters a group after `attempts` failed attempts in a row
    /// (at least 1).
    pub fn after<S: Scope>(mut self, scope: S, attempts: u32) -> Self {
        self.attempts.insert(scope.value(), attempts.max(1));
        self
    }

    /// The attempts allowed in the scope with this stored value, if it opted in.
    pub fn attempts_for(&self, scope_value: i32) -> Option<u32> {
        self.attempts.get(&scope_value).copied()
    }
}

impl<C: Category> Clone for Drainer<C> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            admin: self.admin.clone(),
            receivers: self.receivers.clone(),
            config: self.config,
            controls: self.controls.clone(),
            clock: self.clock.clone(),
            owner: self.owner.clone(),
            dead_letter_after: self.dead_letter_after.clone(),
            abandoned: self.abandoned.clone(),
            planner: self.planner.clone(),
            recovery: self.recovery.clone(),
            completer: self.completer.clone(),
        }
    }
}

impl<C: Category> std::fmt::Debug for Drainer<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drainer")
            .field("owner", &self.owner)
            .field("config", &self.config)
            .field("receivers", &self.receivers)
            .finish_non_exhaustive()
    }
}

/// What [`Drainer::backlog`] measured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backlog {
    /// The outbox table.
    pub kind: OutboxKind,
    /// Rows pending (not yet delivered).
    pub depth: u64,
    /// How long the oldest pending row has waited; `None` when none is.
    pub oldest_age: Option<Duration>,
    /// Shards backing off after a failure (not quarantined, not paused).
    pub failing_shards: u64,
    /// Shards quarantined after a permanent error.
    pub quarantined_shards: u64,
    /// Shards parked by an operator's pause.
    pub paused_shards: u64,
    /// Dead tuples of the table, where the store can tell (PostgreSQL).
    pub dead_tuples: Option<u64>,
    /// Age of the oldest open transaction of the database, which holds
    /// back vacuum, where the store can tell (PostgreSQL).
    pub oldest_transaction_age: Option<Duration>,
    /// Rows in the dead-letter table for this outbox table.
    pub dead_letters: u64,
    /// Per declared scope (and any unknown scope with pending rows), in
    /// scope order: every declared scope is listed, with 0 when nothing of
    /// it is pending, so that its gauges fall back to 0.
    pub scopes: Vec<ScopeBacklog>,
}

/// One scope's part of a [`Backlog`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeBacklog {
    /// The scope's declared name (its value, for a scope this binary does
    /// not declare).
    pub scope: String,
    /// Rows pending.
    pub depth: u64,
    /// How long its oldest pending row has waited; `None` when none is.
    pub oldest_age: Option<Duration>,
}

impl ScopeBacklog {
    fn of(scope: String, depth: Option<&crate::store::ScopeDepth>, now: DateTime<Utc>) -> Self {
        Self {
            scope,
            depth: depth.map_or(0, |depth| depth.depth),
            oldest_age: depth.map(|depth| {
                (now - depth.oldest_date_added)
                    .to_std()
                    .unwrap_or(Duration::ZERO)
            }),
        }
    }
}

impl Backlog {
    /// Publishes it as gauges.
    pub(crate) fn publish(&self) {
        observe::backlog(self);
    }
}

/// How the first part of a background round went, for the worker loop: the
/// number of shards claimed once their first commit is done (0 when nothing
/// was due), or the store's error.
pub(crate) type RoundStarted = oneshot::Sender<Result<ClaimAnswer, String>>;

/// What a background round's claim found, for the worker's loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClaimAnswer {
    /// Shards claimed (or made due again): 0 when nothing was due.
    pub(crate) shards: usize,
    /// Whether due rows may be left that the claim did not take: claim
    /// again at once rather than wait for a wake-up.
    pub(crate) more: bool,
}

impl<C: Category> Drainer<C> {
    /// A drainer over `store` with the default [`DrainConfig`], the system
    /// clock and no runtime controls read yet.
    pub fn new(store: impl Store, receivers: Receivers<C>) -> Self {
        let store = Arc::new(store);
        Self::from_parts(store.clone(), store, Arc::new(receivers))
    }

    /// A drainer over a store and receivers that are already shared; `admin`
    /// is what [`admin`](Self::admin) returns (usually the same store).
    pub fn from_parts(
        store: Arc<dyn DrainStore>,
        admin: Arc<dyn StoreAdmin>,
        receivers: Arc<Receivers<C>>,
    ) -> Self {
        let owner = format!("pid{}-{:08x}", std::process::id(), rand::random::<u32>());
        Self {
            store,
            admin,
            receivers,
            config: DrainConfig::default(),
            controls: Controls::default(),
            clock: Arc::new(SystemClock),
            owner: owner.into(),
            dead_letter_after: Arc::new(DeadLetterPolicy::new()),
            abandoned: Arc::default(),
            planner: Arc::default(),
            recovery: Arc::default(),
            completer: Arc::default(),
        }
    }

    /// Opts `scope` into dead-lettering: after `attempts` failed attempts in a
    /// row, a failing group is moved to the dead-letter table and its shard
    /// goes on with the next group. Scopes not named here retry forever
    /// (Sentry's behaviour, and the default). Dead-lettered rows can be
    /// listed and replayed through [`StoreAdmin`].
    pub fn with_dead_letter<S: Scope>(mut self, scope: S, attempts: u32) -> Self {
        let policy = Arc::make_mut(&mut self.dead_letter_after);
        *policy = std::mem::take(policy).after(scope, attempts);
        self
    }

    /// Replaces the dead-letter policy. Default: every scope retries forever.
    pub fn with_dead_letters(mut self, policy: DeadLetterPolicy) -> Self {
        self.dead_letter_after = Arc::new(policy);
        self
    }

    /// Replaces the tuning.
    pub fn with_config(mut self, config: DrainConfig) -> Self {
        self.config = config;
        self
    }

    /// Replaces the clock (tests move a [`ManualClock`](crate::ManualClock)).
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Replaces the clock with one that is already shared.
    pub fn with_shared_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Who claims, as claims record it.
    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    /// Names this worker in claims (default: process id and a random suffix).
    pub fn with_owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into().into();
        self
    }

    /// The tuning.
    pub fn config(&self) -> &DrainConfig {
        &self.config
    }

    /// The store's hot path.
    pub fn store(&self) -> &Arc<dyn DrainStore> {
        &self.store
    }

    /// The store's inspection and administration.
    pub fn admin(&self) -> &Arc<dyn StoreAdmin> {
        &self.admin
    }

    /// The receivers.
    pub fn receivers(&self) -> &Receivers<C> {
        &self.receivers
    }

    /// Its cache of the runtime controls (see [`crate::control`]).
    pub fn controls(&self) -> &Controls {
        &self.controls
    }

    /// Pauses `target` in every process (keep and skip; see
    /// [`crate::control`]): stored, then this drainer's cache is read again.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn pause(
        &self,
        target: ControlTarget,
        reason: Option<String>,
    ) -> Result<(), StoreError> {
        self.set_control(target, ControlAction::Pause, reason).await
    }

    /// Culls `target` in every process (drop; see [`crate::control`]); a
    /// pause it replaces is resumed.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn cull(
        &self,
        target: ControlTarget,
        reason: Option<String>,
    ) -> Result<(), StoreError> {
        self.set_control(target.clone(), ControlAction::Cull, reason)
            .await?;
        self.release_parked(&[target]).await
    }

    /// Lifts the control of `target`, in every process; the shards a pause
    /// parked are due at once. Returns whether there was a control.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn resume(&self, target: &ControlTarget) -> Result<bool, StoreError> {
        let cleared = self.admin.clear_control(target).await?;
        self.refresh_controls().await?;
        self.release_parked(std::slice::from_ref(target)).await?;
        Ok(cleared)
    }

    async fn set_control(
        &self,
        target: ControlTarget,
        action: ControlAction,
        reason: Option<String>,
    ) -> Result<(), StoreError> {
        let control = RuntimeControl {
            target,
            action,
            reason,
            created_at: self.now(),
        };
        self.admin.set_control(&control).await?;
        tracing::info!(target = ?control.target, action = action.as_str(), reason = ?control.reason, "outbox runtime control set");
        self.refresh_controls().await
    }

    /// Reads the controls again; releases the shards parked under pauses
    /// that are gone.
    pub(crate) async fn refresh_controls(&self) -> Result<(), StoreError> {
        let controls = self.admin.controls().await?;
        let gone = self.controls.replace(controls, self.now());
        let unreleased: Vec<ShardKey> = self
            .controls
            .take_unreleased()
            .into_iter()
            .filter(|shard| self.controls.action_for(shard) != Some(ControlAction::Pause))
            .collect();
        self.retry_parked(&unreleased).await?;
        if !gone.is_empty() {
            self.release_parked(&gone).await?;
        }
        Ok(())
    }

    /// Reads the controls again if the cache is older than
    /// `controls_refresh`. A failed read keeps the cache (and is retried at
    /// the next call).
    pub(crate) async fn refresh_controls_if_stale(&self) {
        let now = self.now();
        let stale_before = now
            - chrono::Duration::from_std(self.config.controls_refresh)
                .unwrap_or(chrono::Duration::MAX);
        if self.controls.is_fresh(stale_before) {
            return;
        }
        if let Err(error) = self.refresh_controls().await {
            tracing::warn!(%error, "could not read the outbox runtime controls; the last ones read hold");
        }
    }

    /// Makes due the parked shards of `targets` that no pause covers now.
    async fn release_parked(&self, targets: &[ControlTarget]) -> Result<(), StoreError> {
        let mut kinds: Vec<OutboxKind> = targets.iter().map(ControlTarget::kind).collect();
        kinds.dedup();
        for kind in kinds {
            let parked = self.parked_shards(kind).await?;
            let release: Vec<ShardKey> = parked
                .into_iter()
                .filter(|shard| targets.iter().any(|target| target.covers(shard)))
                .filter(|shard| self.controls.action_for(shard) != Some(ControlAction::Pause))
                .collect();
            self.retry_parked(&release).await?;
        }
        Ok(())
    }

    /// Makes due the parked shards no pause covers: those parked by a
    /// process that stopped before it read the resume. The background
    /// worker calls it as it starts.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn release_orphaned_pauses(&self) -> Result<(), StoreError> {
        self.refresh_controls().await?;
        for kind in OutboxKind::ALL {
            let release: Vec<ShardKey> = self
                .parked_shards(kind)
                .await?
                .into_iter()
                .filter(|shard| self.controls.action_for(shard) != Some(ControlAction::Pause))
                .collect();
            self.retry_parked(&release).await?;
        }
        Ok(())
    }

    async fn parked_shards(&self, kind: OutboxKind) -> Result<Vec<ShardKey>, StoreError> {
        const AT_MOST: usize = 10_000;
        Ok(self
            .admin
            .failing_shards(kind, AT_MOST)
            .await?
            .into_iter()
            .filter(|failing| failing.state.is_paused())
            .map(|failing| failing.shard)
            .collect())
    }

    async fn retry_parked(&self, shards: &[ShardKey]) -> Result<(), StoreError> {
        if shards.is_empty() {
            return Ok(());
        }
        let released = match self.admin.retry_now(shards, self.now()).await {
            Ok(released) => released,
            Err(error) => {
                self.controls.add_unreleased(shards.iter().cloned());
                return Err(error);
            }
        };
        if released.len() < shards.len() {
            // Their buckets are held: tried again at the next read of the
            // controls.
            tracing::debug!(
                parked = shards.len(),
                released = released.len(),
                "some parked outbox shards are in held buckets; released later"
            );
            self.controls.add_unreleased(
                shards
                    .iter()
                    .filter(|shard| !released.contains(shard))
                    .cloned(),
            );
        }
        Ok(())
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The current time of the drainer's clock.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    pub(crate) fn dead_letter_policy(&self) -> &DeadLetterPolicy {
        &self.dead_letter_after
    }

    pub(crate) fn planner(&self) -> &ClaimPlanner {
        &self.planner
    }

    pub(crate) fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// Makes due the shards whose target came back in this round (see
    /// `drain::recovery`). A failure only leaves them to their backoff.
    /// Returns how many shards it made due.
    pub(crate) async fn expedite_recovered(&self) -> usize {
        let now = self.now();
        let due = self.recovery.take_due(now, self.config.recovery_batch);
        if due.is_empty() {
            return 0;
        }
        match self.admin.retry_now(&due, now).await {
            Ok(released) => {
                self.recovery.released(&released);
                if released.len() > 1 {
                    tracing::info!(
                        shards = released.len(),
                        "outbox receiver is back: shards that backed off on it are due again"
                    );
                } else {
                    tracing::debug!(shards = released.len(), "outbox receiver is down: probing");
                }
                released.len()
            }
            Err(error) => {
                tracing::warn!(%error, "could not make backed-off shards due; they wait out their backoff");
                0
            }
        }
    }

    pub(crate) fn abandoned(&self) -> &Arc<Abandoned> {
        &self.abandoned
    }

    pub(crate) fn completer(&self) -> &Completer {
        &self.completer
    }

    /// Calls `hook` with a kind after the completer released buckets of it
    /// (the worker wakes its drain: a request that found such a bucket held
    /// left its rows to the drain).
    pub(crate) fn on_flushes_completed(&self, hook: impl Fn(OutboxKind) + Send + Sync + 'static) {
        self.completer.on_release(Arc::new(hook));
    }

    /// What the completer's task takes from this drainer when it starts.
    pub(crate) fn completer_parts(&self) -> CompleterParts {
        CompleterParts {
            store: self.store.clone(),
            clock: self.clock.clone(),
            abandoned: self.abandoned.clone(),
        }
    }

    /// Waits until every synchronous flush of this drainer (and its clones)
    /// that delivered so far is completed: its delivered rows deleted and
    /// its buckets released, which happens in the background after the
    /// flush returns (see [`prepare_flush`](Self::prepare_flush)). Tests
    /// that look at the outbox right after a flush, and shutdowns, wait on
    /// it.
    pub async fn settled(&self) {
        self.completer.settled().await;
    }

    /// How long the oldest pending row of `kind` has waited, by this
    /// drainer's clock; `None` when nothing is pending.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn oldest_pending_age(
        &self,
        kind: OutboxKind,
    ) -> Result<Option<Duration>, StoreError> {
        let oldest = self.admin.oldest_pending(kind).await?;
        Ok(oldest.map(|oldest| {
            (self.clock.now() - oldest)
                .to_std()
                .unwrap_or(Duration::ZERO)
        }))
    }

    /// The backlog of `kind` as operators watch it: pending rows, the age of
    /// the oldest, the shards that fail (at most the first 10,000 are
    /// counted), and the table's dead tuples and the age of the oldest open
    /// transaction (PostgreSQL), the dead letters, and each scope's depth and
    /// oldest age. A few reads; the worker publishes them as gauges (see
    /// [`crate::metrics`]).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn backlog(&self, kind: OutboxKind) -> Result<Backlog, StoreError> {
        const COUNTED: usize = 10_000;
        let depth = self.admin.pending_count(kind).await?;
        let oldest_age = self.oldest_pending_age(kind).await?;
        let failing = self.admin.failing_shards(kind, COUNTED).await?;
        let count = |which: fn(&crate::store::ShardState) -> bool| {
            failing.iter().filter(|shard| which(&shard.state)).count() as u64
        };
        let quarantined_shards = count(crate::store::ShardState::is_quarantined);
        let paused_shards = count(crate::store::ShardState::is_paused);
        let health = self.admin.table_health(kind).await?;
        let dead_letters = self.admin.dead_letter_count(kind).await?;
        let now = self.clock.now();
        let mut measured = self.admin.scope_depths(kind).await?;
        let mut scopes: Vec<ScopeBacklog> = C::Scope::ALL
            .iter()
            .map(|scope| {
                let found = measured
                    .iter()
                    .position(|depth| depth.scope == scope.value())
                    .map(|at| measured.swap_remove(at));
                ScopeBacklog::of(scope.name().to_owned(), found.as_ref(), now)
            })
            .collect();
        scopes.extend(
            measured
                .iter()
                .map(|depth| ScopeBacklog::of(depth.scope.to_string(), Some(depth), now)),
        );
        Ok(Backlog {
            kind,
            depth,
            oldest_age,
            failing_shards: failing.len() as u64 - quarantined_shards - paused_shards,
            quarantined_shards,
            paused_shards,
            dead_tuples: health.dead_tuples,
            oldest_transaction_age: health.oldest_transaction_age,
            dead_letters,
            scopes,
        })
    }

    /// An operator's retry: makes `shards` (failing, paused or quarantined)
    /// due at once, and returns those it released. A worker may hold a
    /// shard's bucket for a moment (it met the quarantined shard, leaves
    /// it, releases the bucket), so the shards still held are asked for
    /// again, every 50 ms for up to a second; those held after that are
    /// left out of the answer (ask again).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn retry_now(&self, shards: &[ShardKey]) -> Result<Vec<ShardKey>, StoreError> {
        const ASKS: u32 = 20;
        const PAUSE: Duration = Duration::from_millis(50);
        let mut released = Vec::new();
        let mut left = shards.to_vec();
        for attempt in 0..ASKS {
            if attempt > 0 {
                tokio::time::sleep(PAUSE).await;
            }
            let now_released = self.admin.retry_now(&left, self.now()).await?;
            left.retain(|shard| !now_released.contains(shard));
            released.extend(now_released);
            if left.is_empty() {
                break;
            }
        }
        Ok(released)
    }

    /// Ends, now, the claims of rounds that stopped without ending them, so
    /// that their shards need not wait for the lease to run out: a round whose
    /// future was dropped (a worker cut off at its shutdown bound, a client
    /// gone during a synchronous flush) or that failed on a store error.
    /// Clones of this drainer share the list. The background worker calls
    /// this before each round and at shutdown. Returns how many claims it
    /// ended.
    ///
    /// Safe: a dropped round can no longer deliver or commit, and a commit
    /// under an expired claim deletes nothing (fencing).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails; the claims not yet ended are
    /// kept for the next call (or expire by themselves).
    pub async fn release_abandoned(&self) -> Result<u64, StoreError> {
        let now = self.clock.now();
        let mut pending = self
            .abandoned
            .take()
            .into_iter()
            .filter(|claim| claim.lease_until > now);
        let mut released = 0;
        while let Some(claim) = pending.next() {
            match self.store.expire_claims(claim.kind, claim.token, now).await {
                Ok(count) => {
                    released += count;
                    observe::abandoned_released(claim.kind, count);
                }
                Err(error) => {
                    self.abandoned.push(claim);
                    pending.for_each(|rest| self.abandoned.push(rest));
                    return Err(error);
                }
            }
        }
        if released > 0 {
            tracing::info!(
                claims = released,
                "released the claims of cancelled outbox rounds"
            );
        }
        Ok(released)
    }

    /// Whether [`release_abandoned`](Self::release_abandoned) has anything to do.
    pub fn has_abandoned(&self) -> bool {
        !self.abandoned.is_empty()
    }

    /// One background round over `kind`: claims the free buckets of the
    /// oldest due rows and delivers them. Delivery failures are in the
    /// report; only a store failure is an error.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails; claims already made are then
    /// filed for [`release_abandoned`](Self::release_abandoned), and expire
    /// after their lease if nobody releases them.
    pub async fn drain_due(&self, kind: OutboxKind) -> Result<DrainReport, StoreError> {
        self.drain_due_up_to(kind, None).await
    }

    /// Like [`drain_due`](Self::drain_due), limited to rows with ids at most
    /// `up_to_id` (everything written before a point in time).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn drain_due_up_to(
        &self,
        kind: OutboxKind,
        up_to_id: Option<i64>,
    ) -> Result<DrainReport, StoreError> {
        self.round_due(kind, up_to_id, None).await
    }

    /// A background round that reports through `started` once its first
    /// commit is done, so that the worker can claim the next while this one
    /// waits for its slow receivers.
    pub(crate) async fn round_due(
        &self,
        kind: OutboxKind,
        up_to_id: Option<i64>,
        started: Option<RoundStarted>,
    ) -> Result<DrainReport, StoreError> {
        self.refresh_controls_if_stale().await;
        let mut request = self.claim_request(kind, 0, up_to_id);
        self.planner.plan(&self.config, &mut request);
        let (shards, more) = match self.store.claim_due(&request).await {
            Ok(claim) => {
                self.planner.observe(&request, &claim);
                let more = claim.may_have_more(&request);
                (claim.shards, more)
            }
            Err(error) => {
                if let Some(started) = started {
                    let _ = started.send(Err(error.to_string()));
                }
                return Err(error);
            }
        };
        if shards.is_empty() {
            // Shards made due here are claimed by the next round at once,
            // not after the poll interval: the loop goes on when this says
            // something was claimed.
            let expedited = self.expedite_recovered().await;
            if let Some(started) = started {
                let _ = started.send(Ok(ClaimAnswer {
                    shards: expedited,
                    more: expedited > 0,
                }));
            }
            return Ok(DrainReport::default());
        }
        // Claimed: the worker may claim again while this round delivers (a
        // claim passes over the buckets it holds). Waiting for its first
        // commit would keep every other shard waiting behind its slowest
        // one: a deep shard, a slow receiver.
        if let Some(started) = started {
            let _ = started.send(Ok(ClaimAnswer {
                shards: shards.len(),
                more,
            }));
        }
        let report = Round::new(self.clone(), &request, false).run(shards).await;
        self.expedite_recovered().await;
        if more {
            // The worker may have found nothing beside this round and gone
            // to sleep: what is left of its shards is due now.
            self.completer().released(kind);
        }
        report
    }
}
