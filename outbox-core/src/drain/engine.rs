//! What a round runs on: the store's hot path, the receivers, the tuning,
//! the clock, and the state its clones share (claims to give back, the
//! claim planner, recovering receivers, the completer). The modules that
//! claim, deliver and commit take an [`Engine`]; the public
//! [`Drainer`](super::Drainer) wraps one.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::abandoned::Abandoned;
use super::complete::{Completer, CompleterParts};
use super::config::DrainConfig;
use super::planner::ClaimPlanner;
use super::recovery::Recovery;
use crate::clock::Clock;
use crate::control::Controls;
use crate::receiver::Receivers;
use crate::registry::{Category, Scope};
use crate::shard::ShardKey;
use crate::store::{DrainStore, StoreAdmin};

tokio::task_local! {
    /// Shards being delivered further up this task's call stack.
    pub(crate) static DELIVERING: Arc<Vec<ShardKey>>;
}

/// The drain's engine: cheap to clone, clones share everything.
pub(crate) struct Engine<C: Category> {
    pub(super) store: Arc<dyn DrainStore>,
    /// For making shards due again when their receiver recovers.
    pub(super) admin: Arc<dyn StoreAdmin>,
    pub(super) receivers: Arc<Receivers<C>>,
    pub(super) config: DrainConfig,
    pub(super) controls: Controls,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) owner: Arc<str>,
    pub(super) dead_letter_after: Arc<DeadLetterPolicy>,
    pub(super) abandoned: Arc<Abandoned>,
    pub(super) planner: Arc<ClaimPlanner>,
    pub(super) recovery: Arc<Recovery>,
    pub(super) completer: Arc<Completer>,
    /// Rows the background rounds hold while they deliver.
    pub(super) held: Arc<super::held::HeldRows>,
    /// What the rounds did since the last history sample.
    pub(crate) tally: Arc<super::tally::Tally>,
}

impl<C: Category> Clone for Engine<C> {
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
            held: self.held.clone(),
            tally: self.tally.clone(),
        }
    }
}

impl<C: Category> Engine<C> {
    /// An engine with the default tuning, no controls read yet, and a new
    /// owner name.
    pub(super) fn new(
        store: Arc<dyn DrainStore>,
        admin: Arc<dyn StoreAdmin>,
        receivers: Arc<Receivers<C>>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let owner = format!("pid{}-{:08x}", std::process::id(), rand::random::<u32>());
        Self {
            store,
            admin,
            receivers,
            config: DrainConfig::default(),
            controls: Controls::default(),
            clock,
            owner: owner.into(),
            dead_letter_after: Arc::new(DeadLetterPolicy::new()),
            abandoned: Arc::default(),
            planner: Arc::default(),
            recovery: Arc::default(),
            completer: Arc::default(),
            held: Arc::default(),
            tally: Arc::default(),
        }
    }

    /// Records this process's history samples of `backlog` (see
    /// [`crate::history`]), removing those older than `retention`.
    pub(crate) async fn record_history(
        &self,
        backlog: &super::Backlog,
        interval: std::time::Duration,
        retention: std::time::Duration,
    ) -> Result<(), crate::store::StoreError> {
        let now = self.now();
        let samples = self.tally.samples(backlog, &self.owner, now, interval);
        let keep_after = chrono::Duration::from_std(retention)
            .ok()
            .and_then(|retention| now.checked_sub_signed(retention))
            .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC);
        self.admin.record_history(&samples, keep_after).await
    }

    pub(crate) fn store(&self) -> &Arc<dyn DrainStore> {
        &self.store
    }

    pub(crate) fn receivers(&self) -> &Receivers<C> {
        &self.receivers
    }

    pub(crate) fn config(&self) -> &DrainConfig {
        &self.config
    }

    pub(crate) fn controls(&self) -> &Controls {
        &self.controls
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Who claims, as claims record it.
    pub(crate) fn owner(&self) -> &str {
        &self.owner
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

    pub(crate) fn abandoned(&self) -> &Arc<Abandoned> {
        &self.abandoned
    }

    pub(crate) fn completer(&self) -> &Completer {
        &self.completer
    }

    /// What the completer's task takes from this engine when it starts.
    pub(crate) fn completer_parts(&self) -> CompleterParts {
        CompleterParts {
            store: self.store.clone(),
            clock: self.clock.clone(),
            abandoned: self.abandoned.clone(),
        }
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
    attempts: std::collections::HashMap<i32, u32>,
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
