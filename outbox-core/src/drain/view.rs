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
    AdminSnapshot, Count, DeadLetterRow, FailingShard, HorizonHolder, ScopeDepth, ShardDepth,
    StoreAdmin, StoreError, TableHealth,
};

/// A read-only view of a drain's store ([`Drainer::view`](super::Drainer::view)):
/// each method is one read (or a few, for [`backlog`](Self::backlog)).
///
/// Cheap to clone.
pub struct DrainView<C: Category> {
    admin: Arc<dyn StoreAdmin>,
    clock: Arc<dyn Clock>,
    count_cap: u64,
    category: PhantomData<fn() -> C>,
}

impl<C: Category> Clone for DrainView<C> {
    fn clone(&self) -> Self {
        Self {
            admin: self.admin.clone(),
            clock: self.clock.clone(),
            count_cap: self.count_cap,
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
    pub(super) fn new(admin: Arc<dyn StoreAdmin>, clock: Arc<dyn Clock>, count_cap: u64) -> Self {
        Self {
            admin,
            clock,
            count_cap,
            category: PhantomData,
        }
    }

    /// How many rows its counts count at most
    /// ([`DrainConfig::count_cap`](super::DrainConfig::count_cap)).
    pub fn count_cap(&self) -> u64 {
        self.count_cap
    }

    /// The current time of the drain's clock.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Rows pending in `kind`, every one counted (its cost grows with the
    /// backlog: the admin reads use [`snapshot`](Self::snapshot) and
    /// [`backlog`](Self::backlog), whose counts are capped).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn pending_count(&self, kind: OutboxKind) -> Result<u64, StoreError> {
        self.admin.pending_count(kind).await
    }

    /// The deepest pending shards first, at most `limit`, every row counted
    /// (its cost grows with the backlog; [`snapshot`](Self::snapshot) reads
    /// them capped).
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

    /// Shards parked on a payload version their receiver does not know (a
    /// producer deployed ahead of it), next attempt first, at most `limit`
    /// ([`StoreAdmin::parked_shards`]).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn parked_shards(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<FailingShard>, StoreError> {
        self.admin.parked_shards(kind, limit).await
    }

    /// How many dead letters `kind` holds, every one counted (for a tool
    /// that pages through them all; the admin reads cap theirs).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn dead_letter_count(&self, kind: OutboxKind) -> Result<u64, StoreError> {
        self.admin.dead_letter_count(kind).await
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
    /// each) and the dead letters of `kind`, read in one transaction, every
    /// count capped at [`count_cap`](Self::count_cap) (see
    /// [`AdminSnapshot`]).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn snapshot(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<AdminSnapshot, StoreError> {
        self.admin.snapshot(kind, limit, self.count_cap).await
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
    /// the oldest, the shards that fail, and the table's dead tuples and
    /// what holds vacuum back (PostgreSQL), the dead letters, and each
    /// scope's depth and oldest age. One read
    /// ([`StoreAdmin::read_backlog`]: one statement on PostgreSQL), its
    /// counts capped at [`count_cap`](Self::count_cap) so that it costs the
    /// same on any backlog; the worker publishes it as gauges (see
    /// [`crate::metrics`]).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn backlog(&self, kind: OutboxKind) -> Result<Backlog, StoreError> {
        let reading = self.admin.read_backlog(kind, self.count_cap).await?;
        let now = self.now();
        Ok(Backlog {
            kind,
            depth: reading.pending,
            oldest_age: reading.oldest_date_added.map(|oldest| age(now, oldest)),
            failing_shards: reading.failing_shards,
            parked_shards: reading.parked_shards,
            quarantined_shards: reading.quarantined_shards,
            paused_shards: reading.paused_shards,
            dead_tuples: reading.health.dead_tuples,
            oldest_transaction_age: reading.health.oldest_transaction_age,
            horizon: reading.health.horizon,
            dead_letters: reading.dead_letters,
            scopes: Self::scopes(reading.scopes, now),
        })
    }

    /// Every declared scope's backlog (0 when nothing is pending), then any
    /// scope this binary does not declare.
    fn scopes(mut measured: Vec<ScopeDepth>, now: DateTime<Utc>) -> Vec<ScopeBacklog> {
        let mut scopes: Vec<ScopeBacklog> = C::Scope::ALL
            .iter()
            .map(|scope| {
                let found = measured
                    .iter()
                    .position(|depth| depth.scope == scope.value())
                    .map(|at| measured.swap_remove(at));
                ScopeBacklog::of(scope.value(), Some(scope.name()), found.as_ref(), now)
            })
            .collect();
        scopes.extend(
            measured
                .iter()
                .map(|depth| ScopeBacklog::of(depth.scope, None, Some(depth), now)),
        );
        scopes
    }
}

/// How long since `then`, by `now` (0 when `then` is later).
fn age(now: DateTime<Utc>, then: DateTime<Utc>) -> Duration {
    (now - then).to_std().unwrap_or(Duration::ZERO)
}

/// What [`DrainView::backlog`] measured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backlog {
    /// The outbox table.
    pub kind: OutboxKind,
    /// Rows pending (not yet delivered): exact up to the view's
    /// [`count_cap`](DrainView::count_cap), above it estimated or at least
    /// the cap.
    pub depth: Count,
    /// How long the oldest pending row has waited; `None` when none is.
    pub oldest_age: Option<Duration>,
    /// Shards backing off after a failure (not quarantined, not paused, not
    /// parked), of the first `count_cap` shard states.
    pub failing_shards: u64,
    /// Shards parked on a payload version their receiver does not know
    /// (see [`DrainView::parked_shards`]), of the first `count_cap`.
    pub parked_shards: u64,
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
    /// Rows in the dead-letter table for this outbox table: exact up to the
    /// cap, else at least the cap.
    pub dead_letters: Count,
    /// Per declared scope (and any unknown scope with pending rows), in
    /// scope order: every declared scope is listed, with 0 when nothing of
    /// it is pending, so that its gauges fall back to 0.
    pub scopes: Vec<ScopeBacklog>,
}

/// One scope's part of a [`Backlog`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeBacklog {
    /// The scope's stored value.
    pub scope: i32,
    /// The scope's declared name; `None` for a scope this binary does not
    /// declare.
    pub scope_name: Option<&'static str>,
    /// Rows pending: exact up to the cap, above it estimated or at least
    /// what was counted.
    pub depth: Count,
    /// How long its oldest pending row has waited; `None` when none is (see
    /// [`ScopeDepth::oldest_date_added`] above the cap).
    pub oldest_age: Option<Duration>,
}

impl ScopeBacklog {
    fn of(
        scope: i32,
        scope_name: Option<&'static str>,
        depth: Option<&ScopeDepth>,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            scope,
            scope_name,
            depth: depth.map_or(Count::Exact(0), |depth| depth.depth),
            oldest_age: depth.map(|depth| age(now, depth.oldest_date_added)),
        }
    }

    /// Its declared name, or its value for a scope this binary does not
    /// declare: the `scope` label of its gauges and history samples.
    pub fn label(&self) -> String {
        self.scope_name
            .map_or_else(|| self.scope.to_string(), str::to_owned)
    }
}

impl Backlog {
    /// Publishes it as gauges.
    pub(crate) fn publish(&self) {
        let kind = self.kind.as_str();
        let seconds = |age: Option<Duration>| age.map_or(0.0, |age| age.as_secs_f64());
        metrics::gauge!(names::BACKLOG_DEPTH, "kind" => kind).set(self.depth.value() as f64);
        metrics::gauge!(names::BACKLOG_OLDEST_AGE, "kind" => kind).set(seconds(self.oldest_age));
        metrics::gauge!(names::FAILING_SHARDS, "kind" => kind).set(self.failing_shards as f64);
        metrics::gauge!(names::QUARANTINED_SHARDS, "kind" => kind)
            .set(self.quarantined_shards as f64);
        metrics::gauge!(names::PAUSED_SHARDS, "kind" => kind).set(self.paused_shards as f64);
        metrics::gauge!(names::PARKED_SHARDS, "kind" => kind).set(self.parked_shards as f64);
        if let Some(dead) = self.dead_tuples {
            metrics::gauge!(names::DEAD_TUPLES, "kind" => kind).set(dead as f64);
        }
        metrics::gauge!(names::OLDEST_TRANSACTION_AGE, "kind" => kind)
            .set(seconds(self.oldest_transaction_age));
        metrics::gauge!(names::DEAD_LETTERS, "kind" => kind).set(self.dead_letters.value() as f64);
        for scope in &self.scopes {
            let name = scope.label();
            metrics::gauge!(names::SCOPE_BACKLOG_DEPTH, "kind" => kind, "scope" => name.clone())
                .set(scope.depth.value() as f64);
            metrics::gauge!(names::SCOPE_BACKLOG_OLDEST_AGE, "kind" => kind, "scope" => name)
                .set(seconds(scope.oldest_age));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::registry! {
        OrgScope = 0 {
            OrgUpdate = 1,
        }
        AuditScope = 2 {
            AuditEvent = 20,
        }
    }

    /// Every declared scope by number and name (0 when nothing is
    /// pending), then a scope this binary does not declare, by number
    /// only; gauges and history samples are labelled with the name, else
    /// the number.
    #[test]
    fn scopes_carry_their_number_and_declared_name() {
        let now = Utc::now();
        let depth = |scope: i32| ScopeDepth {
            scope,
            depth: Count::Exact(3),
            oldest_date_added: now,
        };
        let scopes = DrainView::<OutboxCategory>::scopes(vec![depth(7), depth(0)], now);
        let seen: Vec<(i32, Option<&str>, Count, String)> = scopes
            .iter()
            .map(|scope| (scope.scope, scope.scope_name, scope.depth, scope.label()))
            .collect();
        assert_eq!(
            seen,
            vec![
                (0, Some("OrgScope"), Count::Exact(3), "OrgScope".to_owned()),
                (
                    2,
                    Some("AuditScope"),
                    Count::Exact(0),
                    "AuditScope".to_owned()
                ),
                (7, None, Count::Exact(3), "7".to_owned()),
            ]
        );
    }
}
