//! Deprecated methods of [`Drainer`] and [`DrainConfig`], kept until 0.2:
//! each does what its successor does, and its deprecation names it.
//!
//! - set-up on the drainer (`with_config`, `with_clock`, …) is the
//!   builder's ([`Drainer::builder`]);
//! - reads are the view's ([`Drainer::view`]), changes the operator's
//!   ([`Drainer::operator`]);
//! - three tuning setters have no effect: they keep code compiling, and
//!   say so.

#![allow(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::builder::DrainerBuilder;
use super::config::DrainConfig;
use super::drainer::Drainer;
use super::engine::DeadLetterPolicy;
use super::view::Backlog;
use crate::clock::Clock;
use crate::control::{ControlTarget, Controls};
use crate::receiver::Receivers;
use crate::registry::{Category, Scope};
use crate::shard::{OutboxKind, ShardKey};
use crate::store::{DrainStore, Store, StoreAdmin, StoreError};

/// Set-up, before the builder.
impl<C: Category> Drainer<C> {
    #[deprecated(
        since = "0.1.1",
        note = "use `DrainerBuilder::from_parts(store, admin, receivers).build()`"
    )]
    #[doc(hidden)]
    pub fn from_parts(
        store: Arc<dyn DrainStore>,
        admin: Arc<dyn StoreAdmin>,
        receivers: Arc<Receivers<C>>,
    ) -> Self {
        DrainerBuilder::from_parts(store, admin, receivers).build()
    }

    #[deprecated(
        since = "0.1.1",
        note = "use `DrainerBuilder::from_parts(store.clone(), store, receivers).build()`"
    )]
    #[doc(hidden)]
    pub fn from_shared(store: Arc<dyn Store>, receivers: Arc<Receivers<C>>) -> Self {
        DrainerBuilder::from_parts(store.clone(), store, receivers).build()
    }

    #[deprecated(
        since = "0.1.1",
        note = "use `Drainer::builder(store, receivers).dead_letter(scope, attempts).build()`"
    )]
    #[doc(hidden)]
    pub fn with_dead_letter<S: Scope>(self, scope: S, attempts: u32) -> Self {
        self.rebuild().dead_letter(scope, attempts).build()
    }

    #[deprecated(
        since = "0.1.1",
        note = "use `Drainer::builder(store, receivers).dead_letters(policy).build()`"
    )]
    #[doc(hidden)]
    pub fn with_dead_letters(self, policy: DeadLetterPolicy) -> Self {
        self.rebuild().dead_letters(policy).build()
    }

    #[deprecated(
        since = "0.1.1",
        note = "use `Drainer::builder(store, receivers).config(config).build()`"
    )]
    #[doc(hidden)]
    pub fn with_config(self, config: DrainConfig) -> Self {
        self.rebuild().config(config).build()
    }

    #[deprecated(
        since = "0.1.1",
        note = "use `Drainer::builder(store, receivers).clock(clock).build()`"
    )]
    #[doc(hidden)]
    pub fn with_clock(self, clock: impl Clock) -> Self {
        self.rebuild().clock(clock).build()
    }

    #[deprecated(
        since = "0.1.1",
        note = "use `Drainer::builder(store, receivers).shared_clock(clock).build()`"
    )]
    #[doc(hidden)]
    pub fn with_shared_clock(self, clock: Arc<dyn Clock>) -> Self {
        self.rebuild().shared_clock(clock).build()
    }

    #[deprecated(
        since = "0.1.1",
        note = "use `Drainer::builder(store, receivers).owner(owner).build()`"
    )]
    #[doc(hidden)]
    pub fn with_owner(self, owner: impl Into<String>) -> Self {
        self.rebuild().owner(owner).build()
    }

    #[deprecated(since = "0.1.1", note = "use `drainer.clock().now()`")]
    #[doc(hidden)]
    pub fn now(&self) -> DateTime<Utc> {
        self.clock().now()
    }
}

/// Reads and changes, before the view and the operator.
impl<C: Category> Drainer<C> {
    #[deprecated(
        since = "0.1.1",
        note = "use `drainer.view()` to read and `drainer.operator()` to change"
    )]
    #[doc(hidden)]
    pub fn admin(&self) -> &Arc<dyn StoreAdmin> {
        &self.engine().admin
    }

    #[deprecated(since = "0.1.1", note = "use `drainer.operator().controls()`")]
    #[doc(hidden)]
    pub fn controls(&self) -> &Controls {
        &self.engine().controls
    }

    #[deprecated(
        since = "0.1.1",
        note = "use `drainer.operator().pause(target, reason)`"
    )]
    #[doc(hidden)]
    pub async fn pause(
        &self,
        target: ControlTarget,
        reason: Option<String>,
    ) -> Result<(), StoreError> {
        self.operator().pause(target, reason).await
    }

    #[deprecated(
        since = "0.1.1",
        note = "use `drainer.operator().cull(target, reason)`"
    )]
    #[doc(hidden)]
    pub async fn cull(
        &self,
        target: ControlTarget,
        reason: Option<String>,
    ) -> Result<(), StoreError> {
        self.operator().cull(target, reason).await
    }

    #[deprecated(since = "0.1.1", note = "use `drainer.operator().resume(target)`")]
    #[doc(hidden)]
    pub async fn resume(&self, target: &ControlTarget) -> Result<bool, StoreError> {
        self.operator().resume(target).await
    }

    #[deprecated(since = "0.1.1", note = "use `drainer.operator().retry_now(shards)`")]
    #[doc(hidden)]
    pub async fn retry_now(&self, shards: &[ShardKey]) -> Result<Vec<ShardKey>, StoreError> {
        self.operator().retry_now(shards).await
    }

    #[deprecated(
        since = "0.1.1",
        note = "use `drainer.operator().release_orphaned_pauses()`"
    )]
    #[doc(hidden)]
    pub async fn release_orphaned_pauses(&self) -> Result<(), StoreError> {
        self.operator().release_orphaned_pauses().await
    }

    #[deprecated(since = "0.1.1", note = "use `drainer.view().backlog(kind)`")]
    #[doc(hidden)]
    pub async fn backlog(&self, kind: OutboxKind) -> Result<Backlog, StoreError> {
        self.view().backlog(kind).await
    }

    #[deprecated(
        since = "0.1.1",
        note = "use `drainer.view().oldest_pending_age(kind)`"
    )]
    #[doc(hidden)]
    pub async fn oldest_pending_age(
        &self,
        kind: OutboxKind,
    ) -> Result<Option<Duration>, StoreError> {
        self.view().oldest_pending_age(kind).await
    }
}

/// Setters without an effect.
impl DrainConfig {
    #[deprecated(
        since = "0.1.1",
        note = "no effect: a round claims the buckets of up to `batch_size` due rows; remove it"
    )]
    #[doc(hidden)]
    pub fn shards_per_claim(self, _shards: usize) -> Self {
        self
    }

    #[deprecated(
        since = "0.1.1",
        note = "no effect: a claim reads a shard up to the round's `batch_size` rows; remove it"
    )]
    #[doc(hidden)]
    pub fn max_rows_per_claim(self, _rows: usize) -> Self {
        self
    }

    #[deprecated(
        since = "0.1.1",
        note = "no effect: a round deletes what it delivered in one statement; remove it"
    )]
    #[doc(hidden)]
    pub fn delete_chunk(self, _ids: usize) -> Self {
        self
    }
}

#[deprecated(
    since = "0.1.1",
    note = "no effect (see `DrainConfig::shards_per_claim`)"
)]
#[doc(hidden)]
pub const DEFAULT_SHARDS_PER_CLAIM: usize = 512;

#[deprecated(
    since = "0.1.1",
    note = "no effect (see `DrainConfig::max_rows_per_claim`)"
)]
#[doc(hidden)]
pub const DEFAULT_MAX_ROWS_PER_CLAIM: usize = 10_000;

#[deprecated(since = "0.1.1", note = "no effect (see `DrainConfig::delete_chunk`)")]
#[doc(hidden)]
pub const DEFAULT_DELETE_CHUNK: usize = 1_000;
