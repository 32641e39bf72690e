//! Reading a drain's state, never changing it: the backlog the worker
//! publishes as gauges, and the store's inspection reads the admin API,
//! the dashboard and the CLI show.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::head::{HeadMessage, FAILING_ROWS, HEAD_ROWS};
use crate::clock::Clock;
use crate::control::RuntimeControl;
use crate::metrics as names;
use crate::registry::{Category, Scope};
use crate::shard::{OutboxKind, ShardKey};
use crate::store::{
    AdminSnapshot, DeadLetterRow, FailingShard, HorizonHolder, ScopeDepth, ShardDepth, ShardState,
    StoreAdmin, StoreError, TableHealth,
};

/// A read-only view of a drain's store ([`Drainer::view`](super::Drainer::view)):
/// each method is one read (or a few, for [`backlog`](Self::backlog)).
///
/// Cheap to clone.
pub struct DrainView<C: Category> {
    admin: Arc<dyn StoreAdmin>,
    clock: Arc<dyn Clock>,
    category: PhantomData<fn() -> C>,
}

impl<C: Category> Clone for DrainView<C> {
    fn clone(&self) -> Self {
        Self {
            admin: self.admin.clone(),
            clock: self.clock.clone(),
            category: PhantomData,
        }
    }
}

impl<C: Category> std::fmt::Debug for DrainView<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DrainView").finish_non_exhaustive()
    }
}

impl<C: Category> DrainView<C> {
    pub(super) fn new(admin: Arc<dyn StoreAdmin>, clock: Arc<dyn Clock>) -> Self {
        Self {
            admin,
            clock,
            category: PhantomData,
        }
    }

    /// The current time of the drain's clock.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Rows pending in `kind`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn pending_count(&self, kind: OutboxKind) -> Result<u64, StoreError> {
        self.admin.pending_count(kind).await
    }

    /// The deepest pending shards first, at most `limit`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn shard_depths(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<ShardDepth>, StoreError> {
        self.admin.shard_depths(kind, limit).await
    }

    /// Shards that failed and have not succeeded since, next attempt first,
    /// at most `limit`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn failing_shards(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<FailingShard>, StoreError> {
        self.admin.failing_shards(kind, limit).await
    }

    /// Dead-lettered rows of `kind`, oldest first, at most `limit`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn dead_letters(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<DeadLetterRow>, StoreError> {
        self.admin.dead_letters(kind, limit).await
    }

    /// Pending rows, the deepest and the failing shards (up to `limit`
    /// each) and the dead letters of `kind`, read in one transaction.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn snapshot(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<AdminSnapshot, StoreError> {
        self.admin.snapshot(kind, limit).await
    }

    /// Dead tuples of `kind`'s table and the age of the oldest open
    /// transaction.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn table_health(&self, kind: OutboxKind) -> Result<TableHealth, StoreError> {
        self.admin.table_health(kind).await
    }

    /// The runtime controls as stored (what every process applies within
    /// its refresh interval).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn controls(&self) -> Result<Vec<RuntimeControl>, StoreError> {
        self.admin.controls().await
    }

    /// The head message of `shard` (its oldest pending row, the rows
    /// delivered with it and the shard's failure state), or `None` when
    /// nothing of it is pending.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn head(&self, shard: &ShardKey) -> Result<Option<HeadMessage>, StoreError> {
        let rows = self.admin.shard_head(shard, HEAD_ROWS).await?;
        if rows.is_empty() {
            return Ok(None);
        }
        let state = self
            .admin
            .failing_shards(shard.kind(), FAILING_ROWS)
            .await?
            .into_iter()
            .find(|failing| &failing.shard == shard)
            .map(|failing| failing.state);
        Ok(HeadMessage::of::<C>(&rows, state))
    }

    /// The history samples of `kind` taken in the last `span` by every
    /// worker (see [`crate::history`]; [`crate::history::points`] merges
    /// them into a chart's points), oldest first.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn history(
        &self,
        kind: OutboxKind,
        span: Duration,
    ) -> Result<Vec<crate::history::Sample>, StoreError> {
        let since = chrono::Duration::from_std(span)
            .ok()
            .and_then(|span| self.now().checked_sub_signed(span))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        self.admin.history(kind, since).await
    }

    /// The newest `limit` records of the operators' audit log, newest
    /// first (see [`crate::audit`]).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn audit_log(
        &self,
        limit: usize,
    ) -> Result<Vec<crate::audit::AuditRecord>, StoreError> {
        self.admin.audit_log(limit).await
    }

    /// The highest row id of `kind`, if any row is pending.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn max_id(&self, kind: OutboxKind) -> Result<Option<i64>, StoreError> {
        self.admin.max_id(kind).await
    }

    /// Whether a drain round of `kind` would find a row due now.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn has_due(&self, kind: OutboxKind) -> Result<bool, StoreError> {
        self.admin.has_due(kind, self.now()).await
    }

    /// How long the oldest pending row of `kind` has waited, by the drain's
    /// clock; `None` when nothing is pending.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn oldest_pending_age(
        &self,
        kind: OutboxKind,
    ) -> Result<Option<Duration>, StoreError> {
        let oldest = self.admin.oldest_pending(kind).await?;
        Ok(oldest.map(|oldest| (self.now() - oldest).to_std().unwrap_or(Duration::ZERO)))
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
        let count = |which: fn(&ShardState) -> bool| {
            failing.iter().filter(|shard| which(&shard.state)).count() as u64
        };
        let quarantined_shards = count(ShardState::is_quarantined);
        let paused_shards = count(ShardState::is_paused);
        let health = self.admin.table_health(kind).await?;
        let dead_letters = self.admin.dead_letter_count(kind).await?;
        let scopes = self.scopes(kind).await?;
        Ok(Backlog {
            kind,
            depth,
            oldest_age,
            failing_shards: failing.len() as u64 - quarantined_shards - paused_shards,
            quarantined_shards,
            paused_shards,
            dead_tuples: health.dead_tuples,
            oldest_transaction_age: health.oldest_transaction_age,
            horizon: health.horizon,
            dead_letters,
            scopes,
        })
    }

    /// Every declared scope's backlog (0 when nothing is pending), then any
    /// scope this binary does not declare.
    async fn scopes(&self, kind: OutboxKind) -> Result<Vec<ScopeBacklog>, StoreError> {
        let now = self.now();
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
        Ok(scopes)
    }
}

/// What [`DrainView::backlog`] measured.
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
    /// What holds vacuum back the furthest, where the store can tell
    /// (PostgreSQL): the session (or prepared transaction, or replication
    /// slot) to end when dead tuples pile up.
    pub horizon: Option<HorizonHolder>,
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
    fn of(scope: String, depth: Option<&ScopeDepth>, now: DateTime<Utc>) -> Self {
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
        let kind = self.kind.as_str();
        let seconds = |age: Option<Duration>| age.map_or(0.0, |age| age.as_secs_f64());
        metrics::gauge!(names::BACKLOG_DEPTH, "kind" => kind).set(self.depth as f64);
        metrics::gauge!(names::BACKLOG_OLDEST_AGE, "kind" => kind).set(seconds(self.oldest_age));
        metrics::gauge!(names::FAILING_SHARDS, "kind" => kind).set(self.failing_shards as f64);
        metrics::gauge!(names::QUARANTINED_SHARDS, "kind" => kind)
            .set(self.quarantined_shards as f64);
        metrics::gauge!(names::PAUSED_SHARDS, "kind" => kind).set(self.paused_shards as f64);
        if let Some(dead) = self.dead_tuples {
            metrics::gauge!(names::DEAD_TUPLES, "kind" => kind).set(dead as f64);
        }
        metrics::gauge!(names::OLDEST_TRANSACTION_AGE, "kind" => kind)
            .set(seconds(self.oldest_transaction_age));
        metrics::gauge!(names::DEAD_LETTERS, "kind" => kind).set(self.dead_letters as f64);
        for scope in &self.scopes {
            let name = scope.scope.clone();
            metrics::gauge!(names::SCOPE_BACKLOG_DEPTH, "kind" => kind, "scope" => name.clone())
                .set(scope.depth as f64);
            metrics::gauge!(names::SCOPE_BACKLOG_OLDEST_AGE, "kind" => kind, "scope" => name)
                .set(seconds(scope.oldest_age));
        }
    }
}
