//! The operator's kill switch: shards to skip, per scope, changeable at runtime.
//!
//! A skipped shard delivers nothing. Its coalescing groups are culled down to
//! their newest row (older rows are deleted), and the shard is rescheduled with
//! backoff, so that lifting the switch later delivers the newest state of each
//! object. This is Sentry's `should_skip_shard`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use crate::registry::Scope;
use crate::shard::ShardKey;

/// Shared, runtime-updatable sets of skipped shard identifiers, per scope.
/// Clones share one set.
#[derive(Clone, Debug, Default)]
pub struct KillSwitch {
    skipped: Arc<RwLock<HashMap<i32, HashSet<i64>>>>,
}

impl KillSwitch {
    /// A kill switch that skips nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the skipped shard identifiers of `scope`.
    pub fn set<S: Scope>(&self, scope: S, identifiers: impl IntoIterator<Item = i64>) {
        let identifiers: HashSet<i64> = identifiers.into_iter().collect();
        let mut skipped = self.skipped.write().unwrap_or_else(|p| p.into_inner());
        if identifiers.is_empty() {
            skipped.remove(&scope.value());
        } else {
            skipped.insert(scope.value(), identifiers);
        }
    }

    /// Adds one shard identifier of `scope` to the skipped set.
    pub fn skip<S: Scope>(&self, scope: S, identifier: i64) {
        let mut skipped = self.skipped.write().unwrap_or_else(|p| p.into_inner());
        skipped.entry(scope.value()).or_default().insert(identifier);
    }

    /// Removes one shard identifier of `scope` from the skipped set.
    pub fn resume<S: Scope>(&self, scope: S, identifier: i64) {
        let mut skipped = self.skipped.write().unwrap_or_else(|p| p.into_inner());
        if let Some(set) = skipped.get_mut(&scope.value()) {
            set.remove(&identifier);
        }
    }

    /// Whether `shard` is skipped.
    pub fn is_skipped(&self, shard: &ShardKey) -> bool {
        let skipped = self.skipped.read().unwrap_or_else(|p| p.into_inner());
        skipped
            .get(&shard.scope())
            .is_some_and(|set| set.contains(&shard.identifier()))
    }
}
