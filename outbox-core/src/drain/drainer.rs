//! The public face of the drain: a [`Drainer`] (set up by its
//! [builder](super::DrainerBuilder)) holds an engine over a store and receivers,
//! runs background rounds on it, and hands out the
//! narrower handles the rest of the system takes: its [operator](DrainOperator)
//! (runtime controls, retries) and its [read-only view](DrainView)
//! (backlog, inspection). The synchronous flush is in `flush.rs`.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::config::DrainConfig;
use super::engine::Engine;
use super::observe;
use super::operator::DrainOperator;
use super::report::DrainReport;
use super::round::Round;
use super::view::DrainView;
use crate::clock::Clock;
use crate::receiver::Receivers;
use crate::registry::Category;
use crate::shard::OutboxKind;
use crate::store::{DrainStore, StoreError};

/// Delivers outbox messages from a store to [`Receivers`].
///
/// Cheap to clone; clones share the store, receivers, clock and the cache of
/// runtime controls.
/// See the [module documentation](crate::drain) for how a round works.
pub struct Drainer<C: Category> {
    engine: Engine<C>,
}

impl<C: Category> Clone for Drainer<C> {
    fn clone(&self) -> Self {
        Self {
            engine: self.engine.clone(),
        }
    }
}

impl<C: Category> std::fmt::Debug for Drainer<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drainer")
            .field("owner", &self.engine.owner)
            .field("config", &self.engine.config)
            .field("receivers", &self.engine.receivers)
            .finish_non_exhaustive()
    }
}

/// How the first part of a background round went, for the worker loop: the
/// number of shards claimed once their first commit is done (0 when nothing
/// was due), or the store's error.
pub(crate) type RoundStarted = oneshot::Sender<Result<ClaimAnswer, String>>;

/// What a background round's claim found, for the worker's loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClaimAnswer {
    /// Shards claimed (or made due again): 0 when nothing was due.
    pub(crate) shards: usize,
    /// Whether due rows may be left that the claim did not take: claim
    /// again at once rather than wait for a wake-up.
    pub(crate) more: bool,
}

impl<C: Category> Drainer<C> {
    pub(super) fn from_engine(engine: Engine<C>) -> Self {
        Self { engine }
    }

    pub(super) fn into_engine(self) -> Engine<C> {
        self.engine
    }

    /// The tuning.
    pub fn config(&self) -> &DrainConfig {
        &self.engine.config
    }

    /// The store's hot path.
    pub fn store(&self) -> &Arc<dyn DrainStore> {
        &self.engine.store
    }

    /// The receivers.
    pub fn receivers(&self) -> &Receivers<C> {
        &self.engine.receivers
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.engine.clock
    }

    /// The operator's handle: runtime controls, an operator's retry, dead
    /// letters put back or thrown away. What it changes, this drainer (and
    /// its clones) sees at once.
    pub fn operator(&self) -> DrainOperator {
        DrainOperator::new(
            self.engine.admin.clone(),
            self.engine.controls.clone(),
            self.engine.clock.clone(),
            self.engine.config.controls_refresh,
        )
    }

    /// A read-only view of the store: the backlog and the inspection reads.
    pub fn view(&self) -> DrainView<C> {
        DrainView::new(
            self.engine.admin.clone(),
            self.engine.clock.clone(),
            self.engine.config.count_cap,
        )
    }

    pub(crate) fn engine(&self) -> &Engine<C> {
        &self.engine
    }

    /// Calls `hook` with a kind after the completer released buckets of it
    /// (the worker wakes its drain: a request that found such a bucket held
    /// left its rows to the drain).
    pub(crate) fn on_flushes_completed(&self, hook: impl Fn(OutboxKind) + Send + Sync + 'static) {
        self.engine.completer.on_release(Arc::new(hook));
    }

    /// Waits until every synchronous flush of this drainer (and its clones)
    /// that delivered so far is completed: its delivered rows deleted and
    /// its buckets released, which happens in the background after the
    /// flush returns (see [`prepare_flush`](Self::prepare_flush)). Tests
    /// that look at the outbox right after a flush, and shutdowns, wait on
    /// it.
    pub async fn settled(&self) {
        self.engine.completer.settled().await;
    }

    /// Ends, now, the claims of rounds that stopped without ending them, so
    /// that their shards need not wait for the lease to run out: a round whose
    /// future was dropped (a worker cut off at its shutdown bound, a client
    /// gone during a synchronous flush) or that failed on a store error.
    /// Clones of this drainer share the list. The background worker calls
    /// this before each round and at shutdown. Returns how many claims it
    /// ended.
    ///
    /// Safe: a dropped round can no longer deliver or commit, and a commit
    /// under an expired claim deletes nothing (fencing).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails; the claims not yet ended are
    /// kept for the next call (or expire by themselves).
    pub async fn release_abandoned(&self) -> Result<u64, StoreError> {
        let now = self.engine.now();
        let mut pending = self
            .engine
            .abandoned
            .take()
            .into_iter()
            .filter(|claim| claim.lease_until > now);
        let mut released = 0;
        while let Some(claim) = pending.next() {
            match self
                .engine
                .store
                .expire_claims(claim.kind, claim.token, now)
                .await
            {
                Ok(count) => {
                    released += count;
                    observe::abandoned_released(claim.kind, count);
                }
                Err(error) => {
                    self.engine.abandoned.push(claim);
                    pending.for_each(|rest| self.engine.abandoned.push(rest));
                    return Err(error);
                }
            }
        }
        if released > 0 {
            tracing::info!(
                claims = released,
                "released the claims of cancelled outbox rounds"
            );
        }
        Ok(released)
    }

    /// Whether [`release_abandoned`](Self::release_abandoned) has anything to do.
    pub fn has_abandoned(&self) -> bool {
        !self.engine.abandoned.is_empty()
    }

    /// One background round over `kind`: claims the free buckets of the
    /// oldest due rows and delivers them. Delivery failures are in the
    /// report; only a store failure is an error.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails; claims already made are then
    /// filed for [`release_abandoned`](Self::release_abandoned), and expire
    /// after their lease if nobody releases them.
    pub async fn drain_due(&self, kind: OutboxKind) -> Result<DrainReport, StoreError> {
        self.drain_due_up_to(kind, None).await
    }

    /// Like [`drain_due`](Self::drain_due), limited to rows with ids at most
    /// `up_to_id` (everything written before a point in time).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn drain_due_up_to(
        &self,
        kind: OutboxKind,
        up_to_id: Option<i64>,
    ) -> Result<DrainReport, StoreError> {
        self.round_due(kind, up_to_id, None).await
    }

    /// A background round that reports through `started` once its first
    /// commit is done, so that the worker can claim the next while this one
    /// waits for its slow receivers.
    pub(crate) async fn round_due(
        &self,
        kind: OutboxKind,
        up_to_id: Option<i64>,
        started: Option<RoundStarted>,
    ) -> Result<DrainReport, StoreError> {
        self.operator().refresh_controls_if_stale().await;
        let engine = &self.engine;
        let mut request = engine.claim_request(kind, 0, up_to_id);
        engine.planner.plan(&engine.config, &mut request);
        request.held_rows = engine.held.rows(kind);
        let (shards, more) = match engine.store.claim_due(&request).await {
            Ok(claim) => {
                engine.planner.observe(&request, &claim);
                let more = claim.may_have_more(&request);
                (claim.shards, more)
            }
            Err(error) => {
                if let Some(started) = started {
                    let _ = started.send(Err(error.to_string()));
                }
                return Err(error);
            }
        };
        if shards.is_empty() {
            // Shards made due here are claimed by the next round at once,
            // not after the poll interval: the loop goes on when this says
            // something was claimed.
            let expedited = engine.expedite_recovered().await;
            if let Some(started) = started {
                let _ = started.send(Ok(ClaimAnswer {
                    shards: expedited,
                    more: expedited > 0,
                }));
            }
            return Ok(DrainReport::default());
        }
        // Held until the round ends: claims meanwhile scan past them.
        let _held = engine
            .held
            .hold(kind, shards.iter().map(|shard| shard.rows.len()).sum());
        // Claimed: the worker may claim again while this round delivers (a
        // claim passes over the buckets it holds). Waiting for its first
        // commit would keep every other shard waiting behind its slowest
        // one: a deep shard, a slow receiver.
        if let Some(started) = started {
            let _ = started.send(Ok(ClaimAnswer {
                shards: shards.len(),
                more,
            }));
        }
        let report = Round::new(engine.clone(), &request, false)
            .run(shards)
            .await;
        engine.expedite_recovered().await;
        if more {
            // The worker may have found nothing beside this round and gone
            // to sleep: what is left of its shards is due now.
            engine.completer.released(kind);
        }
        report
    }
}
