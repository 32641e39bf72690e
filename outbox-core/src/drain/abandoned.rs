//! Claims whose holder stopped without ending them.
//!
//! A round's future can be dropped mid-way: a worker cut off at its shutdown
//! bound, a client gone during a synchronous flush, a store error between two
//! statements. Its claims would then hold their shards until the lease runs
//! out (30 s by default). A [`ClaimGuard`] notices the drop and files the
//! token here; [`Drainer::release_abandoned`](super::Drainer::release_abandoned)
//! expires those claims at once. That is safe because the dropped future can
//! no longer deliver or commit anything, and fencing refuses a commit under an
//! expired claim anyway.

use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Utc};

use crate::shard::OutboxKind;

/// Claims filed at most; see [`Abandoned::push`].
const MAX_FILED: usize = 1024;

/// One abandoned claim token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AbandonedClaim {
    pub(crate) kind: OutboxKind,
    pub(crate) token: i64,
    /// When the claims would expire by themselves; past it, nothing to do.
    pub(crate) lease_until: DateTime<Utc>,
}

/// The tokens of abandoned claims, shared by a drainer's clones.
#[derive(Debug, Default)]
pub(crate) struct Abandoned(Mutex<Vec<AbandonedClaim>>);

impl Abandoned {
    fn lock(&self) -> MutexGuard<'_, Vec<AbandonedClaim>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Files a claim. The list is bounded: when nobody releases them (a
    /// drainer used without a worker), the oldest entries, whose leases are
    /// the likeliest to have run out anyway, make room.
    pub(crate) fn push(&self, claim: AbandonedClaim) {
        let mut claims = self.lock();
        if claims.len() >= MAX_FILED {
            claims.remove(0);
        }
        claims.push(claim);
    }

    pub(crate) fn take(&self) -> Vec<AbandonedClaim> {
        std::mem::take(&mut *self.lock())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// Files its token as abandoned when dropped before [`finish`](Self::finish).
pub(crate) struct ClaimGuard {
    abandoned: Arc<Abandoned>,
    claim: AbandonedClaim,
    finished: bool,
}

impl ClaimGuard {
    pub(crate) fn new(abandoned: Arc<Abandoned>, claim: AbandonedClaim) -> Self {
        Self {
            abandoned,
            claim,
            finished: false,
        }
    }

    /// The claims were renewed until `lease_until`.
    pub(crate) fn renewed(&mut self, lease_until: DateTime<Utc>) {
        self.claim.lease_until = lease_until;
    }

    /// Every claim of the token ended normally.
    pub(crate) fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.abandoned.push(self.claim);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(token: i64) -> AbandonedClaim {
        AbandonedClaim {
            kind: OutboxKind::Region,
            token,
            lease_until: Utc::now(),
        }
    }

    #[test]
    fn the_list_is_bounded_and_drops_the_oldest() {
        let abandoned = Abandoned::default();
        for token in 0..(MAX_FILED as i64 + 6) {
            abandoned.push(claim(token));
        }
        let filed = abandoned.take();
        assert_eq!(filed.len(), MAX_FILED);
        assert_eq!(filed[0].token, 6);
        assert!(abandoned.is_empty());
    }

    #[test]
    fn a_guard_files_its_claim_only_when_not_finished() {
        let abandoned = Arc::new(Abandoned::default());
        ClaimGuard::new(abandoned.clone(), claim(1)).finish();
        assert!(abandoned.is_empty());
        let mut guard = ClaimGuard::new(abandoned.clone(), claim(2));
        let later = Utc::now() + chrono::Duration::seconds(30);
        guard.renewed(later);
        drop(guard);
        assert_eq!(
            abandoned.take(),
            vec![AbandonedClaim {
                lease_until: later,
                ..claim(2)
            }]
        );
    }
}
