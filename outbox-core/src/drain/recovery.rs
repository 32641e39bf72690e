//! When a receiver comes back: shards that backed off while it failed are
//! made due at once instead of waiting out their backoff (which may have
//! grown to an hour), a bounded number at a time.
//!
//! A shard's *target* is where its delivery goes: the category whose
//! delivery failed, and for the control outbox the shard's region (a
//! region that is down is not "back" because another region answered the
//! same category). Each process
//! remembers, per target, the shards that failed since its last success.
//! Two different shards failing in a row mean the target is down (an
//! outage); one shard failing again and again is that message's own problem
//! (a poison message), which waits out its backoff.
//!
//! - While a target is down, one of its shards is made due at most once a
//!   second (a *probe*, taken in turn), whatever its backoff: the outage
//!   costs one attempt a second, and its end is seen within a second or so,
//!   without waiting for new traffic to succeed.
//! - A success after an outage (a probe's, or a fresh message's) means the
//!   target is back: the shards of the outage are made due
//!   (`StoreAdmin::retry_now`) when the round ends, up to `recovery_batch`
//!   of them, at most once a second per target, so that a target that comes
//!   back is not flooded. Those shards then succeed (and bring the next
//!   batch) or back off further (their attempts are kept).
//!
//! `recovery_batch = 0` turns both off. What it does not cover, on purpose:
//! shards that backed off in another process, or before this one started,
//! wait out their backoff; so do quarantined shards (they wait for an
//! operator).

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
    /// Distinct shards that failed since the last success, in order.
    streak: Vec<ShardKey>,
    /// The same, to look up.
    in_streak: BTreeSet<ShardKey>,
    /// Which shard of the streak the next probe takes.
    next_probe: usize,
    probed_at: Option<DateTime<Utc>>,
    /// Shards of past outages, to make due.
    shards: BTreeSet<ShardKey>,
    /// A delivery of the target's category succeeded since the last batch.
    succeeded: bool,
    expedited_at: Option<DateTime<Utc>>,
}

impl Target {
    /// Two different shards failed in a row: the target is down.
    fn is_down(&self) -> bool {
        self.streak.len() >= 2
    }

    fn forget(&mut self, shard: &ShardKey) {
        self.shards.remove(shard);
        if self.in_streak.remove(shard) {
            self.streak.retain(|failed| failed != shard);
        }
    }
}

/// At most once a second.
fn rested(at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    at.is_none_or(|at| now - at >= chrono::Duration::seconds(1))
}

/// A target: the category's value and the region of a control-outbox shard.
type TargetKey = (i32, Option<String>);

fn key(category: i32, shard: &ShardKey) -> TargetKey {
    (category, shard.region_name().map(str::to_owned))
}

/// Backed-off shards by target, shared by a drainer's clones.
#[derive(Default)]
pub(crate) struct Recovery {
    /// Whether any failure was seen: until then, successes (the hot path)
    /// take no lock.
    armed: AtomicBool,
    targets: Mutex<HashMap<TargetKey, Target>>,
}

impl Recovery {
    fn targets(&self) -> std::sync::MutexGuard<'_, HashMap<TargetKey, Target>> {
        self.targets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `shard` backed off after a delivery of `category` failed.
    pub(crate) fn backed_off(&self, category: i32, shard: &ShardKey) {
        self.armed.store(true, Ordering::Relaxed);
        let mut targets = self.targets();
        let target = targets.entry(key(category, shard)).or_default();
        if target.streak.len() < MAX_REMEMBERED && target.in_streak.insert(shard.clone()) {
            target.streak.push(shard.clone());
        }
    }

    /// `shard` delivered everything it had: nothing to expedite.
    pub(crate) fn recovered(&self, shard: &ShardKey) {
        if !self.armed.load(Ordering::Relaxed) {
            return;
        }
        for target in self.targets().values_mut() {
            target.forget(shard);
        }
    }

    /// A delivery of `category` on `shard` succeeded: after an outage, its
    /// target is back.
    pub(crate) fn succeeded(&self, category: i32, shard: &ShardKey) {
        if !self.armed.load(Ordering::Relaxed) {
            return;
        }
        if let Some(target) = self.targets().get_mut(&key(category, shard)) {
            let streak = std::mem::take(&mut target.streak);
            target.in_streak.clear();
            target.next_probe = 0;
            target.probed_at = None;
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

    /// The shards to make due now: per target, up to `batch` if it came
    /// back since its last batch and had none in the last second; else one
    /// probe if it is down and had none in the last second. Nothing when
    /// `batch` is 0.
    pub(crate) fn take_due(&self, now: DateTime<Utc>, batch: usize) -> Vec<ShardKey> {
        if batch == 0 || !self.armed.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let mut due = Vec::new();
        for target in self.targets().values_mut() {
            if target.succeeded && rested(target.expedited_at, now) {
                target.succeeded = false;
                target.expedited_at = Some(now);
                due.extend(target.shards.iter().take(batch).cloned());
            } else if target.is_down() && target.probed_at.is_none() {
                // The outage is seen now: the first probe in a second.
                target.probed_at = Some(now);
            } else if target.is_down() && rested(target.probed_at, now) {
                target.probed_at = Some(now);
                let probe = target.next_probe % target.streak.len();
                target.next_probe = probe + 1;
                due.push(target.streak[probe].clone());
            }
        }
        due
    }

    /// `shards` were made due: forget them as shards of past outages (they
    /// succeed, or back off and are remembered again).
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
        let now = crate::schedule::due_at_once();
        for id in 0..5 {
            recovery.backed_off(1, &shard(id));
        }
        recovery.backed_off(2, &shard(9));
        assert!(
            recovery.take_due(now, 2).is_empty(),
            "no success yet: target 1 is down, probed a second from now"
        );
        // One failure between successes is not an outage.
        recovery.succeeded(2, &shard(100));
        assert!(
            recovery.take_due(now, 2).is_empty(),
            "a poison message waits"
        );

        recovery.succeeded(1, &shard(100));
        let due = recovery.take_due(now, 2);
        assert_eq!(due, vec![shard(0), shard(1)], "target 1 only, two of them");
        recovery.released(&due);
        recovery.succeeded(1, &shard(100));
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
        recovery.succeeded(1, &shard(100));
        assert_eq!(
            recovery.take_due(later + chrono::Duration::seconds(5), 2),
            vec![shard(4)]
        );
    }

    #[test]
    fn a_target_that_is_down_gets_one_probe_a_second_in_turn() {
        let recovery = Recovery::default();
        let now = crate::schedule::due_at_once();
        recovery.backed_off(1, &shard(0));
        recovery.backed_off(1, &shard(0));
        assert!(
            recovery.take_due(now, 10).is_empty(),
            "one shard failing again is a poison message, not an outage"
        );
        recovery.backed_off(1, &shard(1));
        assert!(
            recovery.take_due(now, 10).is_empty(),
            "down from now: the first probe a second later"
        );
        let now = now + chrono::Duration::seconds(1);
        assert_eq!(recovery.take_due(now, 10), vec![shard(0)], "a probe");
        assert!(
            recovery.take_due(now, 10).is_empty(),
            "not twice in a second"
        );
        let later = now + chrono::Duration::seconds(1);
        // The probe failed again: remembered once, and the next probe is
        // the next shard.
        recovery.backed_off(1, &shard(0));
        assert_eq!(recovery.take_due(later, 10), vec![shard(1)]);
        assert!(recovery.take_due(later, 0).is_empty(), "0 turns it off");
        // A probe that succeeds brings the rest at once, not a second later.
        let after = later + chrono::Duration::seconds(1);
        recovery.succeeded(1, &shard(100));
        recovery.recovered(&shard(0));
        assert_eq!(recovery.take_due(after, 10), vec![shard(1)]);
    }

    #[test]
    fn a_region_that_is_down_is_not_back_because_another_answered() {
        let recovery = Recovery::default();
        let now = crate::schedule::due_at_once();
        let to = |region: &str, id: i64| {
            ShardKey::from_raw(OutboxKind::Control, 0, id, Some(region.to_owned()))
        };
        recovery.backed_off(1, &to("us", 1));
        recovery.backed_off(1, &to("us", 2));
        recovery.succeeded(1, &to("de", 3));
        assert!(
            recovery.take_due(now, 10).is_empty(),
            "us is down since now: no batch for de's success, a probe a second later"
        );
        let later = now + chrono::Duration::seconds(1);
        assert_eq!(recovery.take_due(later, 10), vec![to("us", 1)], "a probe");
        recovery.succeeded(1, &to("us", 1));
        recovery.recovered(&to("us", 1));
        assert_eq!(
            recovery.take_due(later, 10),
            vec![to("us", 2)],
            "us is back"
        );
    }
}
