//! Runtime controls: an operator pauses or culls a shard or a whole scope,
//! in the database, for every worker and every synchronous flush of every
//! process.
//!
//! - **Pause** (keep and skip): nothing of the target is delivered, nothing
//!   is deleted. A paused shard is *parked* when a worker next meets it: its
//!   state gets `retry_at =` [`paused_until`](crate::store::paused_until) (its
//!   attempts and last error stay; the error reads "paused by an
//!   operator"), so claims pass it by and a synchronous flush answers
//!   `FlushError::BackingOff`. Resuming deletes the control and makes the
//!   parked shards of the target due at once.
//! - **Cull** (drop): the rows of the target are deleted without delivery
//!   when a worker next meets them, for as long as the control holds (rule
//!   2's operator's kill switch); counted in `outbox.culled`.
//!
//! Controls live in a table (`outbox_control`, created by the migrations,
//! read and written through `StoreAdmin`). Each drainer keeps a cache of
//! them, [`Controls`], read again when older than
//! `DrainConfig::controls_refresh` (1 s): a control set in one process holds
//! in every other within that time. A worker that parked a shard under a
//! view that was already stale releases it when its next read shows the
//! pause gone; a worker starting up releases parked shards no pause covers.

use std::sync::{Arc, RwLock};

use chrono::{DateTime, Utc};

use crate::shard::{OutboxKind, ShardKey};

/// What a control does to its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ControlAction {
    /// Keep and skip: nothing delivered, nothing deleted, until resumed.
    Pause,
    /// Drop: rows deleted without delivery, while the control holds.
    Cull,
}

impl ControlAction {
    /// Its stored value: 1 pause, 2 cull.
    pub fn as_i16(self) -> i16 {
        match self {
            ControlAction::Pause => 1,
            ControlAction::Cull => 2,
        }
    }

    /// The action of a stored value.
    pub fn from_i16(value: i16) -> Option<Self> {
        match value {
            1 => Some(ControlAction::Pause),
            2 => Some(ControlAction::Cull),
            _ => None,
        }
    }

    /// `pause` or `cull`.
    pub fn as_str(self) -> &'static str {
        match self {
            ControlAction::Pause => "pause",
            ControlAction::Cull => "cull",
        }
    }
}

/// What a control applies to: one shard, or every shard of a scope (of one
/// region, for the control outbox), present and future.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ControlTarget {
    /// One shard.
    Shard(ShardKey),
    /// Every shard of a scope.
    Scope {
        /// The outbox table.
        kind: OutboxKind,
        /// The region, for the control outbox.
        region: Option<String>,
        /// The scope's value.
        scope: i32,
    },
}

impl ControlTarget {
    /// Whether `shard` falls under it.
    pub fn covers(&self, shard: &ShardKey) -> bool {
        match self {
            ControlTarget::Shard(target) => target == shard,
            ControlTarget::Scope {
                kind,
                region,
                scope,
            } => {
                shard.kind() == *kind
                    && shard.scope() == *scope
                    && shard.region_name() == region.as_deref()
            }
        }
    }

    /// The outbox table.
    pub fn kind(&self) -> OutboxKind {
        match self {
            ControlTarget::Shard(shard) => shard.kind(),
            ControlTarget::Scope { kind, .. } => *kind,
        }
    }
}

/// A control, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeControl {
    /// What it applies to.
    pub target: ControlTarget,
    /// What it does.
    pub action: ControlAction,
    /// Why, for the next operator.
    pub reason: Option<String>,
    /// When it was set.
    pub created_at: DateTime<Utc>,
}

/// A drainer's cache of the controls, shared by its clones.
#[derive(Clone, Debug, Default)]
pub struct Controls {
    inner: Arc<RwLock<Cached>>,
}

#[derive(Debug, Default)]
struct Cached {
    controls: Vec<RuntimeControl>,
    read_at: Option<DateTime<Utc>>,
    /// Parked shards to release whose bucket was held when tried.
    unreleased: Vec<ShardKey>,
}

impl Controls {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Cached> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    /// What applies to `shard`: a control of the shard itself before one of
    /// its scope.
    pub fn action_for(&self, shard: &ShardKey) -> Option<ControlAction> {
        let cached = self.read();
        if cached.controls.is_empty() {
            return None;
        }
        let of = |shard_level: bool| {
            cached
                .controls
                .iter()
                .find(|control| {
                    matches!(control.target, ControlTarget::Shard(_)) == shard_level
                        && control.target.covers(shard)
                })
                .map(|control| control.action)
        };
        of(true).or_else(|| of(false))
    }

    /// The controls as last read.
    pub fn current(&self) -> Vec<RuntimeControl> {
        self.read().controls.clone()
    }

    /// Whether the cache was read after `since`.
    pub(crate) fn is_fresh(&self, since: DateTime<Utc>) -> bool {
        self.read().read_at.is_some_and(|at| at > since)
    }

    /// Parked shards whose release must be tried again; taken.
    pub(crate) fn take_unreleased(&self) -> Vec<ShardKey> {
        let mut cached = self.inner.write().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut cached.unreleased)
    }

    /// Parked shards whose release must be tried again.
    pub(crate) fn add_unreleased(&self, shards: impl IntoIterator<Item = ShardKey>) {
        let mut cached = self.inner.write().unwrap_or_else(|p| p.into_inner());
        for shard in shards {
            if !cached.unreleased.contains(&shard) {
                cached.unreleased.push(shard);
            }
        }
    }

    /// Replaces the cache; returns the pauses it had that are gone now.
    pub(crate) fn replace(
        &self,
        controls: Vec<RuntimeControl>,
        at: DateTime<Utc>,
    ) -> Vec<ControlTarget> {
        let mut cached = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let gone = cached
            .controls
            .iter()
            .filter(|old| {
                old.action == ControlAction::Pause
                    && !controls
                        .iter()
                        .any(|new| new.target == old.target && new.action == ControlAction::Pause)
            })
            .map(|old| old.target.clone())
            .collect();
        cached.controls = controls;
        cached.read_at = Some(at);
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::ShardKey;

    fn control(target: ControlTarget, action: ControlAction) -> RuntimeControl {
        RuntimeControl {
            target,
            action,
            reason: None,
            created_at: crate::schedule::due_at_once(),
        }
    }

    #[test]
    fn a_shard_control_wins_over_its_scope_and_gone_pauses_are_reported() {
        let shard = ShardKey::from_raw(OutboxKind::Region, 3, 7, None);
        let other = ShardKey::from_raw(OutboxKind::Region, 3, 8, None);
        let scope = ControlTarget::Scope {
            kind: OutboxKind::Region,
            region: None,
            scope: 3,
        };
        let controls = Controls::default();
        assert_eq!(controls.action_for(&shard), None);
        controls.replace(
            vec![
                control(scope.clone(), ControlAction::Cull),
                control(ControlTarget::Shard(shard.clone()), ControlAction::Pause),
            ],
            crate::schedule::due_at_once(),
        );
        assert_eq!(controls.action_for(&shard), Some(ControlAction::Pause));
        assert_eq!(controls.action_for(&other), Some(ControlAction::Cull));
        let control_outbox = ShardKey::from_raw(OutboxKind::Control, 3, 7, Some("us".into()));
        assert_eq!(controls.action_for(&control_outbox), None, "another table");
        let gone = controls.replace(
            vec![control(scope, ControlAction::Cull)],
            crate::schedule::due_at_once(),
        );
        assert_eq!(gone, vec![ControlTarget::Shard(shard)]);
    }
}
