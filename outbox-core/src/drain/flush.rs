//! The synchronous flush: deliver what a transaction wrote, right after it
//! commits.
//!
//! Two ways, one cheap and one that works everywhere:
//!
//! - **Claimed before the commit** ([`Drainer::prepare_flush`]): the shards'
//!   buckets are leased *inside* the writer's transaction, just before its
//!   `COMMIT`, by one statement that skips what another worker or
//!   transaction holds ([`ClaimBeforeCommit`]); the commit makes the rows and
//!   the claim visible together. After the commit the rows the claim read
//!   are delivered at once, and the delete and release go to the drainer's
//!   completer (`drain::complete`), so the caller waits for its receivers
//!   only: no statement after the `COMMIT`. A shard whose bucket another
//!   process or round held is left to the background drain, never waited
//!   for (one that a completion of this process's flushes is about to
//!   release, or released since the claim, is claimed again once free); a
//!   rollback takes the claim back with the rows.
//! - **Claimed after the commit** ([`Drainer::drain_shard`]): claims the
//!   shard's bucket (waiting up to `sync_wait` while another worker holds
//!   it), delivers and commits: two statements after the `COMMIT`. For
//!   writers that cannot claim inside their transaction, and the fallback of
//!   a prepared flush that did not claim.

use std::time::Duration;

use tokio::time::Instant;

use super::drainer::Drainer;
use super::engine::DELIVERING;
use super::observe;
use super::report::{DrainReport, FlushError};
use super::round::Round;
use crate::control::ControlAction;
use crate::registry::Category;
use crate::shard::ShardKey;
use crate::store::{ClaimBeforeCommit, ClaimRequest, ClaimedShard, ShardClaim, StoreError};

/// The longest pause between two tries of a synchronous flush whose shard's
/// bucket is held: 20 ms.
const MAX_FLUSH_PAUSE: Duration = Duration::from_millis(20);

/// What a flush did.
#[derive(Debug, Default)]
pub struct FlushOutcome {
    /// Deliveries made, across shards.
    pub report: DrainReport,
    /// Shards whose flush failed; their rows stay for the background drain.
    pub errors: Vec<FlushError>,
}

impl FlushOutcome {
    fn absorb(&mut self, report: Result<DrainReport, FlushError>) {
        match report {
            Ok(report) => self.report.absorb(report),
            Err(error) => self.errors.push(error),
        }
    }
}

/// A synchronous flush of the shards a transaction wrote, prepared before
/// its commit: see [`Drainer::prepare_flush`].
#[derive(Debug)]
#[must_use = "a prepared flush delivers nothing until `deliver` is called after the commit"]
pub struct PreparedFlush<C: Category> {
    drainer: Drainer<C>,
    /// One claim per outbox kind written.
    kinds: Vec<KindFlush>,
    /// Shards an operator paused: not claimed, not delivered.
    paused: Vec<ShardKey>,
    /// Whether `deliver` ran (otherwise a claim made is filed as abandoned).
    delivered: bool,
    /// A shard whose bucket was held is left to the background drain
    /// instead of claimed again after the commit.
    leave_held: bool,
}

#[derive(Debug)]
struct KindFlush {
    request: ClaimRequest,
    /// The completer's progress when the claim was made: a bucket it found
    /// held may have been released by a completion since.
    completed_through: u64,
    /// Each shard with the highest id written in it.
    shards: Vec<(ShardKey, i64)>,
    /// What the claim before the commit found, one per shard; `None` when
    /// none was made (the flush then claims after the commit).
    found: Option<Vec<ShardClaim>>,
}

impl<C: Category> Drainer<C> {
    /// Prepares the synchronous flush of `shards` (each with the highest id
    /// the transaction wrote in it): call
    /// [`claim`](PreparedFlush::claim) on the
    /// writer's transaction just before its `COMMIT`, then
    /// [`deliver`](PreparedFlush::deliver) after it. Shards an operator
    /// paused are left out (reported as [`FlushError::Paused`]).
    ///
    /// ```
    /// outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 } }
    /// use outbox_core::{Drainer, MemoryStore, OutboxKind, Receivers, ShardKey};
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let store = MemoryStore::new();
    /// let drainer = Drainer::new(store.clone(), Receivers::new().discard(OutboxCategory::OrgUpdate));
    /// let shard = ShardKey::region(OutboxScope::OrgScope, 7);
    ///
    /// let mut txn = store.begin();
    /// let id = txn.write(&shard, OutboxCategory::OrgUpdate, 1, None);
    /// let mut flush = drainer.prepare_flush([(shard, id)]);
    /// flush.claim(&txn).await.unwrap(); // the last statement before COMMIT
    /// txn.commit();
    /// let outcome = flush.deliver().await; // no statement on this path
    /// assert_eq!((outcome.report.deliveries, outcome.errors.len()), (1, 0));
    /// drainer.settled().await; // the completer deleted the row meanwhile
    /// assert!(store.rows(OutboxKind::Region).is_empty());
    /// # });
    /// ```
    pub fn prepare_flush(
        &self,
        shards: impl IntoIterator<Item = (ShardKey, i64)>,
    ) -> PreparedFlush<C> {
        let mut kinds: Vec<KindFlush> = Vec::new();
        let mut paused = Vec::new();
        for (shard, up_to) in shards {
            if self.engine().controls().action_for(&shard) == Some(ControlAction::Pause) {
                paused.push(shard);
                continue;
            }
            let kind = shard.kind();
            match kinds.iter_mut().find(|flush| flush.request.kind == kind) {
                Some(flush) => flush.shards.push((shard, up_to)),
                None => kinds.push(KindFlush {
                    request: self
                        .engine()
                        .claim_request(kind, self.config().batch_size, None),
                    completed_through: 0,
                    shards: vec![(shard, up_to)],
                    found: None,
                }),
            }
        }
        PreparedFlush {
            drainer: self.clone(),
            kinds,
            paused,
            delivered: false,
            leave_held: false,
        }
    }

    /// The synchronous flush of one shard: claims its bucket (waiting up to
    /// `sync_wait` if another worker holds it), delivers its rows up to
    /// `up_to_id` (all of them when `None`) and reports the first failure.
    /// With a free bucket it costs two statements: claim and read, then
    /// delete and release.
    ///
    /// A shard that backs off after a failure is not tried
    /// ([`FlushError::BackingOff`]): the background drain delivers it when
    /// its backoff ends. Called from inside a receiver on a shard whose
    /// bucket this task is already delivering, it returns at once with the
    /// flush counted as deferred: the rows are delivered by the claim up the
    /// stack or by the background drain.
    ///
    /// # Errors
    ///
    /// [`FlushError`] naming the shard and what happened. The rows stay
    /// committed for the background drain.
    pub async fn drain_shard(
        &self,
        shard: &ShardKey,
        up_to_id: Option<i64>,
    ) -> Result<DrainReport, FlushError> {
        self.drain_shard_within(shard, up_to_id, self.config().sync_wait)
            .await
    }

    /// [`drain_shard`](Self::drain_shard), waiting at most `sync_wait` for a
    /// held bucket (zero: one try).
    pub(crate) async fn drain_shard_within(
        &self,
        shard: &ShardKey,
        up_to_id: Option<i64>,
        sync_wait: Duration,
    ) -> Result<DrainReport, FlushError> {
        let held_up_the_stack = DELIVERING
            .try_with(|stack| {
                stack
                    .iter()
                    .any(|held| held.kind() == shard.kind() && held.bucket() == shard.bucket())
            })
            .unwrap_or(false);
        if held_up_the_stack {
            return Ok(DrainReport {
                deferred: 1,
                ..DrainReport::default()
            });
        }
        self.operator().refresh_controls_if_stale().await;
        if self.engine().controls().action_for(shard) == Some(ControlAction::Pause) {
            // Left to the background drain, which parks it; the caller hears
            // why its rows were not delivered.
            return Err(FlushError::Paused {
                shard: shard.clone(),
            });
        }
        let mut total = DrainReport::default();
        loop {
            let (request, claimed) = self.claim_within(shard, up_to_id, sync_wait).await?;
            // More rows up to `up_to_id` than one batch: another claim after
            // this one's commit.
            let more = claimed.rows.len() >= request.rows;
            let mut report = Round::new(self.engine().clone(), &request, true)
                .run(vec![claimed])
                .await?;
            if let Some(failure) = report.failures.pop() {
                return Err(FlushError::from_failure(failure));
            }
            if let Some(shard) = report.lost_claims.pop() {
                return Err(FlushError::ClaimLost { shard });
            }
            total.absorb(report);
            if !more {
                return Ok(total);
            }
        }
    }

    /// Claims `shard`'s bucket (its rows up to `up_to_id`), trying again
    /// (1 ms, then doubling, each try a new claim) while another worker
    /// holds it, for at most `sync_wait`.
    async fn claim_within(
        &self,
        shard: &ShardKey,
        up_to_id: Option<i64>,
        sync_wait: Duration,
    ) -> Result<(ClaimRequest, ClaimedShard), FlushError> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            let request =
                self.engine()
                    .claim_request(shard.kind(), self.config().batch_size, up_to_id);
            match self.store().claim_shard(&request, shard).await? {
                ShardClaim::Claimed(claimed) => return Ok((request, claimed)),
                ShardClaim::BackingOff(state) => {
                    return Err(FlushError::BackingOff {
                        shard: shard.clone(),
                        retry_at: state.retry_at,
                    })
                }
                ShardClaim::Held => {
                    let waited = started.elapsed();
                    if waited >= sync_wait {
                        return Err(FlushError::ShardBusy {
                            shard: shard.clone(),
                            waited,
                        });
                    }
                    tokio::time::sleep(pause.min(sync_wait - waited)).await;
                    pause = (pause * 2).min(MAX_FLUSH_PAUSE);
                }
            }
        }
    }
}

impl<C: Category> PreparedFlush<C> {
    /// Leaves a shard whose bucket the claim found held to the background
    /// drain (reported as [`FlushError::ShardBusy`], nothing waited for),
    /// instead of claiming it again after the commit, waiting up to
    /// `sync_wait` ([`Drainer::drain_shard`]). Set it when a background
    /// drain runs; without one, held shards would wait for the next flush.
    pub fn leave_held_to_background(&mut self) {
        self.leave_held = true;
    }

    /// Whether [`claim`](Self::claim) ran (otherwise `deliver` claims each
    /// shard after the commit, [`Drainer::drain_shard`]).
    pub fn is_claimed(&self) -> bool {
        self.kinds.iter().all(|flush| flush.found.is_some())
    }

    /// Whether there is nothing to flush.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty() && self.paused.is_empty()
    }

    /// Claims the shards on `on`: the writer's transaction, last, right
    /// before its `COMMIT` (so that the claim's row locks are held for one
    /// round trip, and a rollback takes the claim back), or, after the
    /// commit, a connection of its own (one statement after the `COMMIT`).
    /// A bucket held elsewhere is not waited for.
    ///
    /// # Errors
    ///
    /// The store's error. On PostgreSQL a failed statement aborts the
    /// transaction it ran in, which then cannot commit: roll it back.
    pub async fn claim(
        &mut self,
        on: &(impl ClaimBeforeCommit + ?Sized),
    ) -> Result<(), StoreError> {
        for flush in &mut self.kinds {
            let now = self.drainer.clock().now();
            flush.request.now = now;
            flush.request.lease_until = now + super::claim::to_chrono(self.drainer.config().lease);
            flush.completed_through = self.drainer.engine().completer().completed_through();
            flush.found = Some(
                on.claim_before_commit(&flush.request, &flush.shards)
                    .await?,
            );
        }
        Ok(())
    }

    /// Delivers, after the commit: the shards claimed before it from the
    /// rows the claim read (their commit goes to the completer), the others
    /// by claiming them now ([`Drainer::drain_shard`]). A shard whose bucket
    /// was held, or that backs off, or that an operator paused is reported
    /// and left to the background drain.
    pub async fn deliver(mut self) -> FlushOutcome {
        self.delivered = true;
        let mut outcome = FlushOutcome::default();
        outcome.errors.extend(
            std::mem::take(&mut self.paused)
                .into_iter()
                .map(|shard| FlushError::Paused { shard }),
        );
        for flush in std::mem::take(&mut self.kinds) {
            match flush.found {
                Some(found) => {
                    let leave_held = self.leave_held;
                    deliver_claimed(
                        &self.drainer,
                        flush.request,
                        flush.shards.into_iter().zip(found).collect(),
                        leave_held,
                        flush.completed_through,
                        &mut outcome,
                    )
                    .await;
                }
                None => {
                    for (shard, up_to) in flush.shards {
                        let started = std::time::Instant::now();
                        let flushed = self.drainer.drain_shard(&shard, Some(up_to)).await;
                        observe::flushed(shard.kind(), flushed.is_ok(), started.elapsed());
                        outcome.absorb(flushed);
                    }
                }
            }
        }
        outcome
    }
}

/// Delivers what the claim before the commit found.
async fn deliver_claimed<C: Category>(
    drainer: &Drainer<C>,
    request: ClaimRequest,
    found: Vec<((ShardKey, i64), ShardClaim)>,
    leave_held: bool,
    claimed_through: u64,
    outcome: &mut FlushOutcome,
) {
    let sorted = sort_found(
        drainer,
        &request,
        found,
        leave_held,
        claimed_through,
        outcome,
    );
    if !sorted.claimed.is_empty() {
        run_claimed(drainer, &request, sorted.claimed, sorted.truncated, outcome).await;
    }
    for (shard, up_to, wait) in sorted.unfinished {
        if let Some(sequence) = drainer
            .engine()
            .completer()
            .releasing(shard.kind(), shard.bucket())
        {
            drainer.engine().completer().completed(sequence).await;
        }
        let flushed = drainer.drain_shard_within(&shard, Some(up_to), wait).await;
        if let Err(FlushError::ShardBusy { .. }) = &flushed {
            drainer.engine().completer().held_found();
        }
        outcome.absorb(flushed);
    }
}

/// What the claim before the commit found, sorted.
struct Found {
    /// Claimed: delivered from the rows read.
    claimed: Vec<ClaimedShard>,
    /// Shards with more rows than one claim reads, and held shards that may
    /// be waited for: claimed again after the first round, each with how
    /// long it may wait for its bucket.
    unfinished: Vec<(ShardKey, i64, Duration)>,
    /// Some claimed shard was read in part.
    truncated: bool,
}

/// Sorts the claim's answer per shard; a held shard left to the background
/// and a shard that backs off are reported in `outcome` at once.
/// `claimed_through`: the hand-offs the completer had completed when the
/// claim ran.
fn sort_found<C: Category>(
    drainer: &Drainer<C>,
    request: &ClaimRequest,
    found: Vec<((ShardKey, i64), ShardClaim)>,
    leave_held: bool,
    claimed_through: u64,
    outcome: &mut FlushOutcome,
) -> Found {
    let mut sorted = Found {
        claimed: Vec::new(),
        unfinished: Vec::new(),
        truncated: false,
    };
    let sync_wait = drainer.config().sync_wait;
    let completer = drainer.engine().completer();
    for ((shard, up_to), claim) in found {
        match claim {
            ShardClaim::Claimed(shard_claim) => {
                if shard_claim.rows.len() >= request.rows {
                    sorted.truncated = true;
                    sorted.unfinished.push((shard, up_to, sync_wait));
                }
                sorted.claimed.push(shard_claim);
            }
            ShardClaim::Held if !leave_held => sorted.unfinished.push((shard, up_to, sync_wait)),
            // Held by a flush of this process whose completion is on its way
            // (the previous request on the shard, say), or whose completion
            // released this very bucket since the claim: claimed again once
            // it is released. The background drain, woken by this request's
            // commit, may take the bucket first: then the flush waits for
            // its round (which delivers these rows) up to `sync_wait`,
            // instead of answering before they are delivered. A bucket held
            // by another process is not waited for, whatever this process
            // released meanwhile (a paused process's lease would hold the
            // request until it ends).
            ShardClaim::Held
                if completer.released_since(shard.kind(), shard.bucket(), claimed_through)
                    || completer.releasing(shard.kind(), shard.bucket()).is_some() =>
            {
                sorted.unfinished.push((shard, up_to, sync_wait));
            }
            ShardClaim::Held => {
                completer.held_found();
                outcome.errors.push(FlushError::ShardBusy {
                    shard,
                    waited: Duration::ZERO,
                });
            }
            ShardClaim::BackingOff(state) => outcome.errors.push(FlushError::BackingOff {
                shard,
                retry_at: state.retry_at,
            }),
        }
    }
    sorted
}

/// One round over the shards the claim before the commit leased.
async fn run_claimed<C: Category>(
    drainer: &Drainer<C>,
    request: &ClaimRequest,
    claimed: Vec<ClaimedShard>,
    truncated: bool,
    outcome: &mut FlushOutcome,
) {
    let started = std::time::Instant::now();
    let count = claimed.len();
    let mut round = Round::new(drainer.engine().clone(), request, true);
    // A shard read in part is claimed again at once: its bucket must be
    // released by then.
    if !truncated {
        round = round.complete_later();
    }
    match round.run(claimed).await {
        Ok(mut report) => {
            outcome
                .errors
                .extend(report.failures.drain(..).map(FlushError::from_failure));
            outcome.errors.extend(
                report
                    .lost_claims
                    .drain(..)
                    .map(|shard| FlushError::ClaimLost { shard }),
            );
            outcome.report.absorb(report);
        }
        Err(error) => outcome.errors.push(FlushError::Store(error)),
    }
    let ok = outcome.errors.is_empty();
    for _ in 0..count {
        observe::flushed(request.kind, ok, started.elapsed());
    }
}

impl<C: Category> Drop for PreparedFlush<C> {
    fn drop(&mut self) {
        if self.delivered {
            return;
        }
        // Dropped between its claim and its delivery (the caller's future
        // was cancelled, or the commit failed): whatever it leased is ended
        // by the worker's next round instead of waiting out the lease.
        for flush in &self.kinds {
            if flush.found.is_some() {
                self.drainer
                    .engine()
                    .abandoned()
                    .push(super::abandoned::AbandonedClaim {
                        kind: flush.request.kind,
                        token: flush.request.token,
                        lease_until: flush.request.lease_until,
                    });
            }
        }
    }
}
