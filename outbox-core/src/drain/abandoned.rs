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

    pub(crate) fn push(&self, claim: AbandonedClaim) {
        self.lock().push(claim);
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
