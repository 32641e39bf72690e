use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::{FutureExt, StreamExt};
use tracing::Instrument;

use super::abandoned::{Abandoned, AbandonedClaim, ClaimGuard};
use super::config::DrainConfig;
use super::report::{DeliveryError, DrainReport, FlushError, ShardFailure};
use crate::clock::{Clock, SystemClock};
use crate::coalesce::{coalesce, CoalescingGroup};
use crate::kill_switch::KillSwitch;
use crate::message::{Message, StoredRow};
use crate::metrics as names;
use crate::receiver::Receivers;
use crate::registry::{Category, Scope};
use crate::shard::{OutboxKind, ShardKey};
use crate::store::DeadLetter;
use crate::store::{
    ClaimRequest, CommitBatch, ShardClaim, ShardCommit, ShardEnd, ShardRead, Store, StoreError,
};

tokio::task_local! {
    /// Shards being delivered further up this task's call stack.
    static DELIVERING: Arc<Vec<ShardKey>>;
}

/// Delivers outbox messages from a [`Store`] to [`Receivers`].
///
/// Cheap to clone; clones share the store, receivers, clock and kill switch.
/// See the [module documentation](crate::drain) for how a round works.
pub struct Drainer<C: Category> {
    store: Arc<dyn Store>,
    receivers: Arc<Receivers<C>>,
    config: DrainConfig,
    kill_switch: KillSwitch,
    clock: Arc<dyn Clock>,
    owner: Arc<str>,
    dead_letter_after: Arc<DeadLetterPolicy>,
    abandoned: Arc<Abandoned>,
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
            receivers: self.receivers.clone(),
            config: self.config,
            kill_switch: self.kill_switch.clone(),
            clock: self.clock.clone(),
            owner: self.owner.clone(),
            dead_letter_after: self.dead_letter_after.clone(),
            abandoned: self.abandoned.clone(),
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

/// A claimed shard being worked through.
struct Active {
    claim: ShardClaim,
    up_to_id: Option<i64>,
    rows_done: usize,
}

/// One shard's result in a round.
struct ShardRound {
    active: Active,
    commit: ShardCommit,
    delivered: Vec<(&'static str, usize)>,
    deliveries: usize,
    culled: usize,
    failures: Vec<ShardFailure>,
}

impl<C: Category> Drainer<C> {
    /// A drainer with the default [`DrainConfig`], the system clock and an
    /// empty kill switch.
    pub fn new(store: impl Store, receivers: Receivers<C>) -> Self {
        Self::from_shared(Arc::new(store), Arc::new(receivers))
    }

    /// A drainer over a store and receivers that are already shared.
    pub fn from_shared(store: Arc<dyn Store>, receivers: Arc<Receivers<C>>) -> Self {
        let owner = format!("pid{}-{:08x}", std::process::id(), rand::random::<u32>());
        Self {
            store,
            receivers,
            config: DrainConfig::default(),
            kill_switch: KillSwitch::default(),
            clock: Arc::new(SystemClock),
            owner: owner.into(),
            dead_letter_after: Arc::new(DeadLetterPolicy::new()),
            abandoned: Arc::default(),
        }
    }

    /// Opts `scope` into dead-lettering: after `attempts` failed attempts in a
    /// row, a failing group is moved to the dead-letter table and its shard
    /// goes on with the next group. Scopes not named here retry forever
    /// (Sentry's behaviour, and the default). Dead-lettered rows can be
    /// listed and replayed through the store.
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

    /// Shares `kill_switch` with this drainer.
    pub fn with_kill_switch(mut self, kill_switch: KillSwitch) -> Self {
        self.kill_switch = kill_switch;
        self
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

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The receivers.
    pub fn receivers(&self) -> &Receivers<C> {
        &self.receivers
    }

    /// The kill switch.
    pub fn kill_switch(&self) -> &KillSwitch {
        &self.kill_switch
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The current time of the drainer's clock.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
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
        let oldest = self.store.oldest_pending(kind).await?;
        Ok(oldest.map(|oldest| {
            (self.clock.now() - oldest)
                .to_std()
                .unwrap_or(Duration::ZERO)
        }))
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
                    metrics::counter!(names::ABANDONED_CLAIMS_RELEASED, "kind" => claim.kind.as_str())
                        .increment(count);
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

    /// One background round over `kind`: claims up to `shards_per_claim` due
    /// shards and works through them. Delivery failures are in the report;
    /// only a store failure is an error.
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
        let request = self.claim_request(kind, self.config.shards_per_claim, up_to_id);
        let claims = self.store.claim_due(&request).await?;
        if claims.is_empty() {
            return Ok(DrainReport::default());
        }
        let active = claims
            .into_iter()
            .map(|claim| Active {
                claim,
                up_to_id,
                rows_done: 0,
            })
            .collect();
        self.run(kind, request.token, active, false).await
    }

    /// The synchronous flush of one shard: claims it (waiting up to
    /// `sync_wait` if another worker holds it), delivers its rows up to
    /// `up_to_id` (all of them when `None`) and reports the first failure.
    ///
    /// Called from inside a receiver on a shard that this task is already
    /// delivering, it returns at once with the flush counted as deferred: the
    /// rows are delivered by the claim up the stack or the background drain.
    ///
    /// # Errors
    ///
    /// [`FlushError`] naming the shard, the category and the receiver's error.
    /// The rows stay committed for the background drain.
    pub async fn drain_shard(
        &self,
        shard: &ShardKey,
        up_to_id: Option<i64>,
    ) -> Result<DrainReport, FlushError> {
        let held_up_the_stack = DELIVERING
            .try_with(|stack| stack.contains(shard))
            .unwrap_or(false);
        if held_up_the_stack {
            return Ok(DrainReport {
                deferred: 1,
                ..DrainReport::default()
            });
        }
        let kind = shard.kind();
        let started = Instant::now();
        let mut pause = Duration::from_millis(1);
        let (claim, token) = loop {
            let request = self.claim_request(kind, 1, up_to_id);
            if let Some(claim) = self.store.claim_shard(&request, shard).await? {
                break (claim, request.token);
            }
            let waited = started.elapsed();
            if waited >= self.config.sync_wait {
                return Err(FlushError::ShardBusy {
                    shard: shard.clone(),
                    waited,
                });
            }
            tokio::time::sleep(pause.min(self.config.sync_wait - waited)).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        };
        let active = vec![Active {
            claim,
            up_to_id,
            rows_done: 0,
        }];
        let mut report = self.run(kind, token, active, true).await?;
        if let Some(failure) = report.failures.pop() {
            return Err(FlushError::from_failure(failure));
        }
        if let Some(shard) = report.lost_claims.pop() {
            return Err(FlushError::ClaimLost { shard });
        }
        Ok(report)
    }

    fn claim_request(&self, kind: OutboxKind, limit: usize, up_to_id: Option<i64>) -> ClaimRequest {
        let now = self.clock.now();
        ClaimRequest {
            kind,
            now,
            lease_until: now + to_chrono(self.config.lease),
            token: new_token(),
            owner: self.owner.to_string(),
            limit,
            up_to_id,
        }
    }

    /// Works through claimed shards round by round until each is released.
    async fn run(
        &self,
        kind: OutboxKind,
        token: i64,
        mut active: Vec<Active>,
        synchronous: bool,
    ) -> Result<DrainReport, StoreError> {
        let mut report = DrainReport {
            shards: active.len(),
            ..DrainReport::default()
        };
        // Files the token as abandoned if this future is dropped or fails
        // before every claim has ended.
        let mut guard = ClaimGuard::new(
            self.abandoned.clone(),
            AbandonedClaim {
                kind,
                token,
                lease_until: active
                    .iter()
                    .map(|a| a.claim.lease_until)
                    .max()
                    .unwrap_or_else(|| self.clock.now()),
            },
        );
        while !active.is_empty() {
            let reads: Vec<ShardRead> = active
                .iter()
                .map(|a| ShardRead {
                    shard: a.claim.shard.clone(),
                    up_to_id: a.up_to_id,
                })
                .collect();
            let rows = self
                .store
                .read_rows(kind, &reads, self.config.batch_size)
                .await?;
            let mut by_shard: HashMap<ShardKey, Vec<StoredRow>> = HashMap::new();
            for row in rows {
                by_shard.entry(row.shard.clone()).or_default().push(row);
            }
            let rounds: Vec<ShardRound> = futures::stream::iter(active.into_iter().map(|a| {
                let rows = by_shard.remove(&a.claim.shard).unwrap_or_default();
                self.deliver_shard(a, rows, synchronous)
            }))
            .buffer_unordered(self.config.concurrency)
            .collect()
            .await;

            let now = self.clock.now();
            let batch = CommitBatch {
                kind,
                token,
                now,
                renew_until: now + to_chrono(self.config.lease),
                delete_chunk: self.config.delete_chunk,
                shards: rounds.iter().map(|r| r.commit.clone()).collect(),
            };
            let outcome = self.store.commit(&batch).await?;
            guard.renewed(batch.renew_until);
            report.rows_deleted += outcome.deleted;
            report.dead_lettered += outcome.dead_lettered;
            if !outcome.lost.is_empty() {
                metrics::counter!(names::CLAIM_LOST, "kind" => kind.as_str())
                    .increment(outcome.lost.len() as u64);
                tracing::warn!(
                    kind = kind.as_str(),
                    shards = outcome.lost.len(),
                    "outbox claims expired before commit; their rows will be delivered again"
                );
            }
            let sync_tag = if synchronous { "true" } else { "false" };
            active = Vec::new();
            for mut round in rounds {
                let lost = outcome.lost.contains(&round.commit.shard);
                if lost {
                    report.lost_claims.push(round.commit.shard.clone());
                } else {
                    for (category, rows) in &round.delivered {
                        metrics::counter!(names::PROCESSED, "category" => *category, "kind" => kind.as_str(), "synchronous" => sync_tag)
                            .increment(*rows as u64);
                    }
                    if round.culled > 0 {
                        metrics::counter!(names::CULLED, "kind" => kind.as_str())
                            .increment(round.culled as u64);
                    }
                    report.deliveries += round.deliveries;
                    report.culled += round.culled;
                }
                report.failures.append(&mut round.failures);
                if !lost && round.commit.end == ShardEnd::Continue {
                    round.active.claim.lease_until = batch.renew_until;
                    active.push(round.active);
                }
            }
        }
        guard.finish();
        Ok(report)
    }

    /// Delivers one shard's rows of this round, in order, stopping at the
    /// first failure or when the lease no longer covers a delivery.
    async fn deliver_shard(
        &self,
        mut active: Active,
        rows: Vec<StoredRow>,
        synchronous: bool,
    ) -> ShardRound {
        let shard = active.claim.shard.clone();
        let mut round = ShardRound {
            commit: ShardCommit {
                shard: shard.clone(),
                delete_ids: Vec::new(),
                dead_letters: Vec::new(),
                end: ShardEnd::Release,
            },
            active: Active {
                claim: active.claim.clone(),
                up_to_id: active.up_to_id,
                rows_done: active.rows_done,
            },
            delivered: Vec::new(),
            deliveries: 0,
            culled: 0,
            failures: Vec::new(),
        };
        if rows.is_empty() {
            return round;
        }
        let full_batch = rows.len() >= self.config.batch_size;
        let groups = coalesce(rows);

        if self.kill_switch.is_skipped(&shard) {
            for group in &groups {
                let older = &group.ids[..group.ids.len() - 1];
                round.commit.delete_ids.extend_from_slice(older);
                round.culled += older.len();
            }
            round.commit.end = self.backoff_end(
                &active.claim,
                "shard skipped by the kill switch",
                active.claim.attempts,
            );
            tracing::info!(%shard, culled = round.culled, "outbox shard skipped by the kill switch");
            return round;
        }

        let stack = DELIVERING
            .try_with(|stack| {
                let mut stack = Vec::clone(stack);
                stack.push(shard.clone());
                stack
            })
            .unwrap_or_else(|_| vec![shard.clone()]);
        let stack = Arc::new(stack);
        let needed = to_chrono(self.config.lease_needed_for_delivery());

        let mut stopped_for_lease = false;
        for group in groups {
            if self.clock.now() + needed > active.claim.lease_until {
                stopped_for_lease = true;
                break;
            }
            match self.deliver_group(&group, synchronous, stack.clone()).await {
                Ok(category) => {
                    round.commit.delete_ids.extend_from_slice(&group.ids);
                    round.delivered.push((category.name(), group.ids.len()));
                    round.deliveries += 1;
                    active.rows_done += group.ids.len();
                }
                Err(error) => {
                    let attempts = active.claim.attempts.saturating_add(1);
                    let category_name = C::try_from(group.category()).ok().map(|c| c.name());
                    metrics::counter!(
                        names::DELIVERY_FAILED,
                        "category" => category_name.unwrap_or("unknown"),
                        "kind" => shard.kind().as_str(),
                        "synchronous" => if synchronous { "true" } else { "false" },
                        "reason" => error.reason()
                    )
                    .increment(1);
                    let dead_letter = self
                        .dead_letter_after
                        .attempts_for(shard.scope())
                        .is_some_and(|max| attempts >= max);
                    if dead_letter {
                        // The scope gives up on this group: move it aside and
                        // go on with the shard, which is healthy again.
                        tracing::error!(
                            %shard,
                            id = group.newest.id,
                            category = category_name.unwrap_or("unknown"),
                            attempts,
                            error = %error,
                            "outbox group dead-lettered"
                        );
                        metrics::counter!(names::DEAD_LETTERED, "category" => category_name.unwrap_or("unknown"), "kind" => shard.kind().as_str())
                            .increment(group.ids.len() as u64);
                        round.commit.dead_letters.push(DeadLetter {
                            ids: group.ids.clone(),
                            error: error.to_string(),
                        });
                        round.failures.push(ShardFailure {
                            shard: shard.clone(),
                            id: group.newest.id,
                            category: group.category(),
                            category_name,
                            object_identifier: group.object_identifier(),
                            retry_at: self.clock.now(),
                            dead_lettered: true,
                            error,
                        });
                        active.claim.attempts = 0;
                        active.claim.last_backoff = None;
                        active.rows_done += group.ids.len();
                        continue;
                    }
                    let end = self.backoff_end(&active.claim, &error.to_string(), attempts);
                    let retry_at = match &end {
                        ShardEnd::Backoff { retry_at, .. } => *retry_at,
                        _ => self.clock.now(),
                    };
                    tracing::warn!(
                        %shard,
                        id = group.newest.id,
                        category = category_name.unwrap_or("unknown"),
                        %retry_at,
                        error = %error,
                        "outbox delivery failed; shard rescheduled"
                    );
                    round.failures.push(ShardFailure {
                        shard: shard.clone(),
                        id: group.newest.id,
                        category: group.category(),
                        category_name,
                        object_identifier: group.object_identifier(),
                        retry_at,
                        dead_lettered: false,
                        error,
                    });
                    round.commit.end = end;
                    round.active.rows_done = active.rows_done;
                    return round;
                }
            }
        }
        round.active.rows_done = active.rows_done;
        // A dead-lettered group reset the shard's failure count.
        round.active.claim.attempts = active.claim.attempts;
        round.active.claim.last_backoff = active.claim.last_backoff;
        round.commit.end = if stopped_for_lease
            || (full_batch && active.rows_done < self.config.max_rows_per_claim)
        {
            ShardEnd::Continue
        } else {
            ShardEnd::Release
        };
        round
    }

    fn backoff_end(&self, claim: &ShardClaim, error: &str, attempts: u32) -> ShardEnd {
        let delay = self.config.backoff.next_delay(claim.last_backoff);
        ShardEnd::Backoff {
            retry_at: self.clock.now() + to_chrono(delay),
            delay,
            error: error.to_owned(),
            attempts,
        }
    }

    /// Delivers one coalescing group to its receiver.
    async fn deliver_group(
        &self,
        group: &CoalescingGroup,
        synchronous: bool,
        stack: Arc<Vec<ShardKey>>,
    ) -> Result<C, DeliveryError> {
        let newest = &group.newest;
        let kind = newest.shard.kind();
        let category = C::try_from(newest.category).map_err(|unknown| {
            metrics::counter!(names::UNKNOWN_CATEGORY, "kind" => kind.as_str(), "category_value" => unknown.0.to_string())
                .increment(1);
            tracing::error!(
                shard = %newest.shard,
                id = newest.id,
                category = unknown.0,
                "outbox row has a category this binary does not know; its shard is held"
            );
            DeliveryError::UnknownCategory(unknown)
        })?;
        let expected_scope = category.scope().value();
        if expected_scope != newest.shard.scope() {
            return Err(DeliveryError::ScopeMismatch {
                category: category.name(),
                expected_scope,
                row_scope: newest.shard.scope(),
            });
        }
        let handler = self
            .receivers
            .handler(category)
            .ok_or(DeliveryError::NoReceiver {
                category: category.name(),
            })?;
        let message = Message {
            id: newest.id,
            first_id: group.first.id,
            coalesced: group.ids.len(),
            shard: newest.shard.clone(),
            category,
            object_identifier: newest.object_identifier,
            payload: newest.payload.clone(),
            date_added: group.first.date_added,
            scheduled_for: newest.scheduled_for,
            scheduled_from: newest.scheduled_from,
            synchronous,
        };
        let sync_tag = if synchronous { "true" } else { "false" };
        let span = tracing::info_span!(
            "outbox.deliver",
            category = category.name(),
            shard = %newest.shard,
            id = newest.id,
            object_identifier = newest.object_identifier,
            coalesced = group.ids.len(),
            synchronous,
        );
        let timeout = self.config.effective_delivery_timeout();
        let started = Instant::now();
        let call = AssertUnwindSafe(handler(message)).catch_unwind();
        let outcome = DELIVERING
            .scope(stack, tokio::time::timeout(timeout, call))
            .instrument(span)
            .await;
        metrics::histogram!(names::SEND_SIGNAL_DURATION, "category" => category.name(), "kind" => kind.as_str(), "synchronous" => sync_tag)
            .record(started.elapsed().as_secs_f64());
        match outcome {
            Err(_elapsed) => Err(DeliveryError::Timeout(timeout)),
            Ok(Err(panic)) => Err(DeliveryError::Panicked(panic_message(panic.as_ref()))),
            Ok(Ok(Err(error))) => Err(DeliveryError::Handler(error)),
            Ok(Ok(Ok(()))) => {
                let now = self.clock.now();
                metrics::histogram!(names::PROCESSING_LAG, "category" => category.name(), "kind" => kind.as_str(), "synchronous" => sync_tag)
                    .record(seconds_between(group.first.scheduled_from, now));
                metrics::histogram!(names::COALESCED_NET_QUEUE_TIME, "category" => category.name(), "kind" => kind.as_str(), "synchronous" => sync_tag)
                    .record(seconds_between(group.first.date_added, now));
                Ok(category)
            }
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

fn seconds_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6
}

/// Converts a std duration, saturating at chrono's maximum.
pub(crate) fn to_chrono(duration: Duration) -> chrono::Duration {
    chrono::Duration::from_std(duration).unwrap_or(chrono::Duration::MAX)
}

/// A random, non-zero fencing token.
fn new_token() -> i64 {
    loop {
        let token = rand::random::<i64>() & i64::MAX;
        if token != 0 {
            return token;
        }
    }
}
