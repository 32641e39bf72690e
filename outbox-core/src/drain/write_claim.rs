//! Claims taken with the outbox insert itself: the synchronous flush's
//! claim, made by the statement that writes the rows instead of one of its
//! own before the `COMMIT`.
//!
//! A unit of work whose context asks for them
//! ([`OutboxContext::claim_with_writes`](crate::OutboxContext::claim_with_writes))
//! lets a store that can (PostgreSQL, `outbox_seaorm`'s write API) lease a
//! shard's bucket in the insert that writes the shard's rows, and read the
//! shard's older pending rows there. When every shard the unit of work wrote
//! was claimed that way, up to the last row written, the flush has nothing
//! left to claim: the `COMMIT` makes the rows and the claims visible
//! together, as a claim before it would, one statement sooner.
//!
//! Every claim of one unit of work and kind carries one token, so that a
//! later claim of the same unit of work (a second write of the shard, a
//! shard of the same bucket, or the claim before the `COMMIT` that a flush
//! makes when some write took no claim) takes a bucket this transaction
//! already leased again, instead of finding it held.

use std::collections::BTreeMap;

use crate::control::ControlAction;
use crate::registry::Category;
use crate::shard::{OutboxKind, ShardKey};
use crate::store::{ClaimRequest, ShardClaim};

use super::drainer::Drainer;

/// Where the claims a write takes come from: the flush's drainer.
pub(crate) trait ClaimSource: Send + Sync + 'static {
    /// A claim request of `kind` as of now, with a new token.
    fn claim_request(&self, kind: OutboxKind) -> ClaimRequest;
    /// The completer's progress (see `PreparedFlush`'s `completed_through`).
    fn completed_through(&self) -> u64;
    /// Whether an operator paused `shard` (its rows are not flushed).
    fn paused(&self, shard: &ShardKey) -> bool;
}

impl<C: Category> ClaimSource for Drainer<C> {
    fn claim_request(&self, kind: OutboxKind) -> ClaimRequest {
        self.engine()
            .claim_request(kind, self.config().batch_size, None)
    }

    fn completed_through(&self) -> u64 {
        self.engine().completer().completed_through()
    }

    fn paused(&self, shard: &ShardKey) -> bool {
        self.engine().controls().action_for(shard) == Some(ControlAction::Pause)
    }
}

/// The claims the writes of one unit of work took, for one kind.
#[derive(Debug)]
pub(crate) struct KindClaims {
    /// The first claim's request: its token is every claim's of the kind,
    /// its lease the earliest to end.
    pub(crate) request: ClaimRequest,
    /// The completer's progress when the first claim was made.
    pub(crate) completed_through: u64,
    /// What each shard's latest claim found, with the highest id written in
    /// the shard when it was made.
    pub(crate) found: BTreeMap<ShardKey, (i64, ShardClaim)>,
    /// A write of this kind took no claim: the flush claims before the
    /// `COMMIT` after all (with the same token).
    pub(crate) incomplete: bool,
}

impl KindClaims {
    fn new(source: &dyn ClaimSource, kind: OutboxKind) -> Self {
        Self {
            request: source.claim_request(kind),
            completed_through: source.completed_through(),
            found: BTreeMap::new(),
            incomplete: false,
        }
    }

    /// What the claims found for `shards` (each with the highest id
    /// written), in order, if every one was claimed by a write up to that
    /// id.
    pub(crate) fn found_for(&mut self, shards: &[(ShardKey, i64)]) -> Option<Vec<ShardClaim>> {
        if self.incomplete
            || !shards.iter().all(|(shard, up_to)| {
                self.found
                    .get(shard)
                    .is_some_and(|(claimed_to, _)| claimed_to == up_to)
            })
        {
            return None;
        }
        Some(
            shards
                .iter()
                .filter_map(|(shard, _)| self.found.remove(shard).map(|(_, claim)| claim))
                .collect(),
        )
    }
}

/// The write claims of one unit of work (kept in its context).
pub(crate) struct WriteClaims {
    source: Box<dyn ClaimSource>,
    pub(crate) kinds: BTreeMap<OutboxKind, KindClaims>,
}

impl std::fmt::Debug for WriteClaims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteClaims")
            .field("kinds", &self.kinds)
            .finish_non_exhaustive()
    }
}

impl WriteClaims {
    pub(crate) fn new<C: Category>(drainer: &Drainer<C>) -> Self {
        Self {
            source: Box::new(drainer.clone()),
            kinds: BTreeMap::new(),
        }
    }

    /// The request a write of `shard` claims with, if it may: as of now,
    /// with the token of the kind's first claim.
    pub(crate) fn request(&mut self, shard: &ShardKey) -> Option<ClaimRequest> {
        if self.source.paused(shard) {
            self.unclaimed(shard.kind());
            return None;
        }
        let kind = shard.kind();
        let fresh = self.source.claim_request(kind);
        let claims = self
            .kinds
            .entry(kind)
            .or_insert_with(|| KindClaims::new(self.source.as_ref(), kind));
        if claims.incomplete {
            return None;
        }
        Some(ClaimRequest {
            token: claims.request.token,
            owner: claims.request.owner.clone(),
            ..fresh
        })
    }

    /// Records what a write's claim of `shard` found.
    pub(crate) fn found(&mut self, shard: &ShardKey, up_to: i64, claim: ShardClaim) {
        let kind = shard.kind();
        let claims = self
            .kinds
            .entry(kind)
            .or_insert_with(|| KindClaims::new(self.source.as_ref(), kind));
        claims.found.insert(shard.clone(), (up_to, claim));
    }

    /// A write of `kind` took no claim.
    pub(crate) fn unclaimed(&mut self, kind: OutboxKind) {
        self.kinds
            .entry(kind)
            .or_insert_with(|| KindClaims::new(self.source.as_ref(), kind))
            .incomplete = true;
    }

    /// A fresh start: the transaction rolled back.
    pub(crate) fn clear(&mut self) {
        self.kinds.clear();
    }
}
