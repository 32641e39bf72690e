//! Building a [`Drainer`]: its store, receivers, tuning, clock, owner name
//! and dead-letter policy, set once before it runs.

use std::sync::Arc;

use super::config::DrainConfig;
use super::drainer::Drainer;
use super::engine::{DeadLetterPolicy, Engine};
use crate::clock::{Clock, SystemClock};
use crate::receiver::Receivers;
use crate::registry::{Category, Scope};
use crate::store::{DrainStore, Store, StoreAdmin};

impl<C: Category> Drainer<C> {
    /// A drainer over `store` with the default [`DrainConfig`], the system
    /// clock, no dead letters and no runtime controls read yet; see
    /// [`builder`](Self::builder) to set any of them.
    pub fn new(store: impl Store, receivers: Receivers<C>) -> Self {
        Self::builder(store, receivers).build()
    }

    /// Sets up a drainer over `store`: its tuning, clock, owner name and
    /// dead-letter policy.
    pub fn builder(store: impl Store, receivers: Receivers<C>) -> DrainerBuilder<C> {
        DrainerBuilder::new(store, receivers)
    }
}

/// Sets up a [`Drainer`]; made by [`Drainer::builder`] (or
/// [`from_parts`](Self::from_parts)), finished by [`build`](Self::build).
///
/// ```
/// outbox_core::registry! {
///     OrganizationScope = 0 (shard_field = "organization_id") {
///         OrganizationUpdate = 1,
///     }
/// }
/// use std::time::Duration;
/// use outbox_core::{DrainConfig, Drainer, MemoryStore, Receivers};
///
/// let receivers = Receivers::new().discard(OutboxCategory::OrganizationUpdate);
/// let drainer = Drainer::builder(MemoryStore::new(), receivers)
///     .config(DrainConfig::default().lease(Duration::from_secs(5)))
///     .dead_letter(OutboxScope::OrganizationScope, 10)
///     .owner("worker-a")
///     .build();
/// assert_eq!(drainer.config().lease_duration(), Duration::from_secs(5));
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct DrainerBuilder<C: Category> {
    engine: Engine<C>,
}

impl<C: Category> std::fmt::Debug for DrainerBuilder<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DrainerBuilder")
            .field("owner", &self.engine.owner)
            .field("config", &self.engine.config)
            .finish_non_exhaustive()
    }
}

impl<C: Category> DrainerBuilder<C> {
    fn new(store: impl Store, receivers: Receivers<C>) -> Self {
        let store = Arc::new(store);
        Self::from_parts(store.clone(), store, Arc::new(receivers))
    }

    /// A builder over a store and receivers that are already shared; `admin`
    /// is what the drainer's [`view`](Drainer::view) reads and its
    /// [`operator`](Drainer::operator) changes (usually the same store).
    pub fn from_parts(
        store: Arc<dyn DrainStore>,
        admin: Arc<dyn StoreAdmin>,
        receivers: Arc<Receivers<C>>,
    ) -> Self {
        Self {
            engine: Engine::new(store, admin, receivers, Arc::new(SystemClock)),
        }
    }

    /// Opts `scope` into dead-lettering: after `attempts` failed attempts in a
    /// row, a failing group is moved to the dead-letter table and its shard
    /// goes on with the next group. Scopes not named here retry forever
    /// (Sentry's behaviour, and the default). Dead-lettered rows can be
    /// listed through the drainer's [`view`](Drainer::view) and replayed
    /// through its [`operator`](Drainer::operator).
    pub fn dead_letter<S: Scope>(mut self, scope: S, attempts: u32) -> Self {
        let policy = Arc::make_mut(&mut self.engine.dead_letter_after);
        *policy = std::mem::take(policy).after(scope, attempts);
        self
    }

    /// Replaces the dead-letter policy. Default: every scope retries forever.
    pub fn dead_letters(mut self, policy: DeadLetterPolicy) -> Self {
        self.engine.dead_letter_after = Arc::new(policy);
        self
    }

    /// Replaces the tuning (default: [`DrainConfig::default`]).
    pub fn config(mut self, config: DrainConfig) -> Self {
        self.engine.config = config;
        self
    }

    /// Replaces the clock (default: the system clock; tests move a
    /// [`ManualClock`](crate::ManualClock)).
    pub fn clock(self, clock: impl Clock) -> Self {
        self.shared_clock(Arc::new(clock))
    }

    /// Replaces the clock with one that is already shared.
    pub fn shared_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.engine.clock = clock;
        self
    }

    /// Names this worker in claims (default: process id and a random suffix).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.engine.owner = owner.into().into();
        self
    }

    /// The drainer.
    pub fn build(self) -> Drainer<C> {
        Drainer::from_engine(self.engine)
    }
}

impl<C: Category> Drainer<C> {
    /// A builder holding this drainer's engine, for the deprecated
    /// `with_*` setters.
    pub(super) fn rebuild(self) -> DrainerBuilder<C> {
        DrainerBuilder {
            engine: self.into_engine(),
        }
    }
}
