//! When a receiver comes back: shards that backed off while it failed are
//! made due at once instead of waiting out their backoff (which may have
//! grown to an hour), a bounded number at a time.
//!
//! A shard's *target* is the category whose delivery failed. Each process
//! remembers, per target, the failures since its last success. A success
//! after two failures or more in a row means the target was down and is
//! back: the shards of those failures are made due (`StoreAdmin::retry_now`)
//! when the round ends, up to `recovery_batch` of them, at most once a
//! second per target, so that a target that comes back is not flooded. Those
//! shards then succeed (and bring the next batch) or back off further (their
//! attempts are kept). A single failure between successes is that message's
//! own problem (a poison message), not an outage: it waits out its backoff.
//!
//! What it does not cover, on purpose: shards that backed off in another
//! process, or before this one started, wait out their backoff; so do
//! quarantined shards (they wait for an operator).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use chrono::{DateTime, Utc};

use crate::shard::ShardKey;

/// Shards remembered per target at most: beyond, they wait out their
/// backoff.
const MAX_REMEMBERED: usize = 10_000;

#[derive(Default)]
struct Target {
    /// Shards of the failures since the last success, in order.
    streak: Vec<ShardKey>,
    /// Shards of past outages, to make due.
    shards: BTreeSet<ShardKey>,
    /// A delivery of the target's category succeeded since the last batch.
    succeeded: bool,
    expedited_at: Option<DateTime<Utc>>,
}

/// Backed-off shards by target (category value), shared by a drainer's clones.
#[derive(Default)]
pub(crate) struct Recovery {
    /// Whether any failure was seen: until then, successes (the hot path)
    /// take no lock.
    armed: AtomicBool,
    targets: Mutex<HashMap<i32, Target>>,
}

impl Recovery {
    fn targets(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Target>> {
        self.targets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `shard` backed off after a delivery of `category` failed.
    pub(crate) fn backed_off(&self, category: i32, shard: &ShardKey) {
        self.armed.store(true, Ordering::Relaxed);
        let mut targets = self.targets();
        let target = targets.entry(category).or_default();
        if target.streak.len() < MAX_REMEMBERED {
            target.streak.push(shard.clone());
        }
    }

    /// `shard` delivered everything it had: nothing to expedite.
    pub(crate) fn recovered(&self, shard: &ShardKey) {
        if !self.armed.load(Ordering::Relaxed) {
            return;
        }
        for target in self.targets().values_mut() {
            target.shards.remove(shard);
            target.streak.retain(|failed| failed != shard);
        }
    }

    /// A delivery of `category` succeeded: after an outage (two failures
    /// or more in a row), its target is back.
    pub(crate) fn succeeded(&self, category: i32) {
        if !self.armed.load(Ordering::Relaxed) {
            return;
        }
        if let Some(target) = self.targets().get_mut(&category) {
            let streak = std::mem::take(&mut target.streak);
            if streak.len() >= 2 {
                for shard in streak {
                    if target.shards.len() < MAX_REMEMBERED {
                        target.shards.insert(shard);
                    }
                }
            }
            target.succeeded = !target.shards.is_empty();
        }
    }

    /// The shards to make due now: up to `batch` per target that succeeded
    /// since its last batch and had none in the last second.
    pub(crate) fn take_due(&self, now: DateTime<Utc>, batch: usize) -> Vec<ShardKey> {
        if !self.armed.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let mut due = Vec::new();
        for target in self.targets().values_mut() {
            let rested = target
                .expedited_at
                .is_none_or(|at| now - at >= chrono::Duration::seconds(1));
            if !target.succeeded || !rested {
                continue;
            }
            target.succeeded = false;
            target.expedited_at = Some(now);
            due.extend(target.shards.iter().take(batch).cloned());
        }
        due
    }

    /// `shards` were made due: forget them (they succeed, or back off and
    /// are remembered again).
    pub(crate) fn released(&self, shards: &[ShardKey]) {
        for target in self.targets().values_mut() {
            for shard in shards {
                target.shards.remove(shard);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::OutboxKind;

    fn shard(id: i64) -> ShardKey {
        ShardKey::from_raw(OutboxKind::Region, 0, id, None)
    }

    #[test]
    fn a_success_releases_a_bounded_batch_at_most_once_a_second() {
        let recovery = Recovery::default();
        let now = crate::the_past();
        for id in 0..5 {
            recovery.backed_off(1, &shard(id));
        }
        recovery.backed_off(2, &shard(9));
        assert!(recovery.take_due(now, 2).is_empty(), "no success yet");
        // One failure between successes is not an outage.
        recovery.succeeded(2);
        assert!(
            recovery.take_due(now, 2).is_empty(),
            "a poison message waits"
        );

        recovery.succeeded(1);
        let due = recovery.take_due(now, 2);
        assert_eq!(due, vec![shard(0), shard(1)], "target 1 only, two of them");
        recovery.released(&due);
        recovery.succeeded(1);
        assert!(
            recovery.take_due(now, 2).is_empty(),
            "not twice in a second"
        );
        let later = now + chrono::Duration::seconds(1);
        assert_eq!(recovery.take_due(later, 2), vec![shard(2), shard(3)]);
        assert!(
            recovery
                .take_due(later + chrono::Duration::seconds(5), 2)
                .is_empty(),
            "only after a new success"
        );
        recovery.recovered(&shard(2));
        recovery.recovered(&shard(3));
        recovery.succeeded(1);
        assert_eq!(
            recovery.take_due(later + chrono::Duration::seconds(5), 2),
            vec![shard(4)]
        );
    }
}
