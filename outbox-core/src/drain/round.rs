//! Running one claim: deliveries, their commits, and keeping the claim alive.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};

use super::abandoned::{AbandonedClaim, ClaimGuard};
use super::claim::to_chrono;
use super::deliver::{deliver_shard, is_backing_off, ShardOutcome};
use super::engine::{Engine, DELIVERING};
use super::lease::LeaseEnd;
use super::observe;
use super::report::{DrainReport, ShardFailure};
use super::wave::deliver_waves;
use crate::registry::Category;
use crate::shard::{OutboxKind, ShardKey};
use crate::store::{ClaimRequest, ClaimedShard, CommitBatch, CommitOutcome, StoreError};

/// A claim being worked through.
///
/// Its shards are delivered concurrently by `concurrency` tasks that take
/// them from a queue, so that commits and renewals never pause a receiver. What
/// finishes is committed together; but finished shards wait at most
/// `commit_interval` for the slower ones, then commit on their own and free
/// their buckets, so that one slow receiver keeps its own bucket and not the
/// whole claim's. Every third of the lease the claim is renewed; if it cannot
/// be, the deliveries still running are cancelled before the lease ends, so
/// that no other worker can take a shard while a receiver still works on it
/// (rule 3).
pub(crate) struct Round<C: Category> {
    drainer: Engine<C>,
    kind: OutboxKind,
    token: i64,
    lease_until: DateTime<Utc>,
    /// `lease_until`, as the delivery tasks read it before each call.
    lease_end: LeaseEnd,
    synchronous: bool,
    /// Hand a finished commit to the completer instead of applying it (a
    /// flush claimed before its transaction's commit).
    complete_later: bool,
}

/// A finished shard's results, kept for the report while its commit is sent.
struct Finished {
    shard: ShardKey,
    delivered: Vec<(&'static str, usize)>,
    culled: usize,
    failures: Vec<ShardFailure>,
    backing_off: bool,
    gave_up: bool,
}

/// A claim's shards, sorted by how they are delivered ([`Round::sort`]).
struct Sorted {
    /// Done already: backing off.
    finished: Vec<ShardOutcome>,
    /// Not finished yet: queued, or in waves.
    pending: HashSet<ShardKey>,
    queue: Queue,
    waves: Vec<ClaimedShard>,
}

/// The shards of a claim waiting for a delivery task, shared by the tasks.
type Queue = Arc<Mutex<VecDeque<ClaimedShard>>>;

fn lock(queue: &Queue) -> MutexGuard<'_, VecDeque<ClaimedShard>> {
    queue.lock().unwrap_or_else(|p| p.into_inner())
}

impl<C: Category> Round<C> {
    pub(crate) fn new(drainer: Engine<C>, request: &ClaimRequest, synchronous: bool) -> Self {
        Self {
            drainer,
            kind: request.kind,
            token: request.token,
            lease_until: request.lease_until,
            lease_end: LeaseEnd::new(request.lease_until),
            synchronous,
            complete_later: false,
        }
    }

    /// Hands the round's commit, when it is the common one (see
    /// [`CommitBatch::is_finished`]), to the drainer's completer and returns
    /// without waiting for it (see `drain::complete`).
    pub(crate) fn complete_later(mut self) -> Self {
        self.complete_later = true;
        self
    }

    /// Delivers and commits `shards`.
    pub(crate) async fn run(
        mut self,
        shards: Vec<ClaimedShard>,
    ) -> Result<DrainReport, StoreError> {
        let report = DrainReport {
            shards: shards.len(),
            ..DrainReport::default()
        };
        // Files the token as abandoned if this future is dropped or fails
        // before every claim has ended.
        let mut guard = ClaimGuard::new(
            self.drainer.abandoned().clone(),
            AbandonedClaim {
                kind: self.kind,
                token: self.token,
                lease_until: self.lease_until,
            },
        );
        let sorted = self.sort(shards);
        let (tasks, delivered) = self.spawn_deliveries(sorted.queue, sorted.waves);
        let report = self
            .collect(
                report,
                sorted.finished,
                sorted.pending,
                tasks,
                delivered,
                &mut guard,
            )
            .await?;
        guard.finish();
        self.drainer.tally.add(self.kind, &report);
        Ok(report)
    }

    /// Sorts the claimed shards: those that back off are finished at once,
    /// those with a message for a batch handler go in waves, the others in
    /// the queue of the delivery tasks.
    fn sort(&self, shards: Vec<ClaimedShard>) -> Sorted {
        let mut sorted = Sorted {
            finished: Vec::new(),
            pending: HashSet::new(),
            queue: Queue::default(),
            waves: Vec::new(),
        };
        let receivers = self.drainer.receivers();
        // Looked at row by row only where a batch handler is registered.
        let batching = receivers.has_batch();
        for shard in shards {
            match shard.state.as_ref() {
                Some(state) if is_backing_off(&self.drainer, &shard) => {
                    sorted
                        .finished
                        .push(ShardOutcome::waiting(shard.shard.clone(), state));
                }
                _ => {
                    sorted.pending.insert(shard.shard.clone());
                    let batched = batching
                        && shard
                            .rows
                            .iter()
                            .any(|row| receivers.is_batch(row.category));
                    if batched {
                        sorted.waves.push(shard);
                    } else {
                        lock(&sorted.queue).push_back(shard);
                    }
                }
            }
        }
        sorted
    }

    /// Starts `concurrency` delivery tasks that take shards from the queue
    /// until it is empty, and one task that delivers the others in waves;
    /// dropping the set (a cancelled round) aborts them. Each finished
    /// shard's outcome comes back on the channel.
    fn spawn_deliveries(
        &self,
        queue: Queue,
        waves: Vec<ClaimedShard>,
    ) -> (JoinSet<()>, mpsc::UnboundedReceiver<ShardOutcome>) {
        let stack: Arc<Vec<ShardKey>> = DELIVERING.try_with(Arc::clone).unwrap_or_default();
        let (outcomes, delivered) = mpsc::unbounded_channel();
        let mut tasks = JoinSet::new();
        if !waves.is_empty() {
            tasks.spawn(deliver_waves(
                self.drainer.clone(),
                waves,
                outcomes.clone(),
                self.lease_end.clone(),
                self.synchronous,
                stack.clone(),
            ));
        }
        let queued = lock(&queue).len();
        for _ in 0..self.drainer.config().concurrency.min(queued) {
            tasks.spawn(deliver_queue(
                self.drainer.clone(),
                queue.clone(),
                outcomes.clone(),
                self.lease_end.clone(),
                self.synchronous,
                stack.clone(),
            ));
        }
        (tasks, delivered)
    }

    /// Collects the outcomes until every shard is finished: commits the
    /// finished ones at most `commit_interval` after the first of a wave,
    /// renews the claim every heartbeat, and gives everything up when the
    /// claim could not be renewed before the lease's margin.
    async fn collect(
        &mut self,
        mut report: DrainReport,
        mut finished: Vec<ShardOutcome>,
        mut pending: HashSet<ShardKey>,
        mut tasks: JoinSet<()>,
        mut delivered: mpsc::UnboundedReceiver<ShardOutcome>,
        guard: &mut ClaimGuard,
    ) -> Result<DrainReport, StoreError> {
        let config = *self.drainer.config();
        let mut heartbeat =
            tokio::time::interval_at(Instant::now() + config.heartbeat(), config.heartbeat());
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let give_up = tokio::time::sleep_until(self.give_up_at());
        tokio::pin!(give_up);
        let wave = tokio::time::sleep_until(Instant::now());
        tokio::pin!(wave);
        let mut wave_armed = false;
        while !pending.is_empty() {
            tokio::select! {
                outcome = delivered.recv() => {
                    let Some(outcome) = outcome else {
                        // Every task ended without finishing its shards: the
                        // engine's own panic (receivers' are caught). Those
                        // shards are committed untouched (their rows stay,
                        // for the next claim) so that their buckets are
                        // released with the others.
                        tracing::error!(shards = pending.len(), "outbox delivery tasks ended early");
                        finished.extend(pending.drain().map(ShardOutcome::untouched));
                        break;
                    };
                    pending.remove(&outcome.commit.shard);
                    finished.push(outcome);
                    if !wave_armed && !pending.is_empty() {
                        wave_armed = true;
                        wave.as_mut().reset(Instant::now() + config.commit_interval);
                    }
                }
                () = &mut wave, if wave_armed => {
                    wave_armed = false;
                    let done = std::mem::take(&mut finished);
                    let in_flight = pending.iter().cloned().collect();
                    self.commit(&mut report, done, in_flight, guard).await?;
                    give_up.as_mut().reset(self.give_up_at());
                }
                _ = heartbeat.tick() => {
                    if self.renew(guard).await {
                        give_up.as_mut().reset(self.give_up_at());
                    }
                }
                () = &mut give_up => {
                    tasks.abort_all();
                    return Ok(self.given_up(report, pending, finished));
                }
            }
        }
        self.commit(&mut report, finished, Vec::new(), guard)
            .await?;
        Ok(report)
    }

    /// The claim could not be renewed in time and every receiver was
    /// stopped before the lease ends. Nothing is committed; the next owner
    /// delivers these shards again.
    fn given_up(
        &self,
        mut report: DrainReport,
        pending: HashSet<ShardKey>,
        finished: Vec<ShardOutcome>,
    ) -> DrainReport {
        let lost: Vec<ShardKey> = pending
            .into_iter()
            .chain(finished.iter().map(|outcome| outcome.commit.shard.clone()))
            .collect();
        observe::claims_lost(self.kind, lost.len(), "the claim could not be renewed");
        report.lost_claims.extend(lost);
        report
            .failures
            .extend(finished.into_iter().flat_map(|outcome| outcome.failures));
        report
    }

    /// When to give the deliveries up unless the claim is renewed: a margin
    /// before the lease ends.
    fn give_up_at(&self) -> Instant {
        let left = (self.lease_until - self.drainer.now())
            .to_std()
            .unwrap_or_default()
            .saturating_sub(self.drainer.config().lease_margin());
        Instant::now() + left
    }

    /// Extends the claim. `false` when it could not be (the give-up timer then
    /// decides); a claim found gone ends the round at once through that timer.
    async fn renew(&mut self, guard: &mut ClaimGuard) -> bool {
        let now = self.drainer.now();
        let until = now + to_chrono(self.drainer.config().lease);
        match self
            .drainer
            .store()
            .renew(self.kind, self.token, now, until)
            .await
        {
            Ok(0) => {
                self.lease_until = now;
                self.lease_end.set(now);
                true
            }
            Ok(_) => {
                self.lease_until = until;
                self.lease_end.set(until);
                guard.renewed(until);
                true
            }
            Err(error) => {
                tracing::warn!(%error, kind = self.kind.as_str(), "could not renew an outbox claim; retrying");
                false
            }
        }
    }

    /// Commits finished shards, keeping the buckets of `in_flight` ones.
    async fn commit(
        &mut self,
        report: &mut DrainReport,
        outcomes: Vec<ShardOutcome>,
        in_flight: Vec<ShardKey>,
        guard: &mut ClaimGuard,
    ) -> Result<(), StoreError> {
        let now = self.drainer.now();
        let mut commits = Vec::with_capacity(outcomes.len());
        let mut results = Vec::with_capacity(outcomes.len());
        for outcome in outcomes {
            results.push(Finished {
                shard: outcome.commit.shard.clone(),
                delivered: outcome.delivered,
                culled: outcome.culled,
                failures: outcome.failures,
                backing_off: outcome.backing_off,
                gave_up: outcome.gave_up,
            });
            commits.push(outcome.commit);
        }
        let batch = CommitBatch {
            kind: self.kind,
            token: self.token,
            now,
            shards: commits,
            in_flight,
            renew_until: now + to_chrono(self.drainer.config().lease),
        };
        let kept_until = (!batch.in_flight.is_empty()).then_some(batch.renew_until);
        let outcome = self.send(batch).await?;
        if let Some(until) = kept_until {
            self.lease_until = until;
            self.lease_end.set(until);
            guard.renewed(until);
        }
        self.tally(report, &outcome, results);
        Ok(())
    }

    /// Commits `batch`, or hands it to the completer (a flush's common
    /// commit, [`complete_later`](Self::complete_later)).
    async fn send(&self, batch: CommitBatch) -> Result<CommitOutcome, StoreError> {
        if !(self.complete_later && batch.is_finished()) {
            return self.drainer.store().commit(&batch).await;
        }
        // Counted as deleted: the completer deletes them, or their rows are
        // delivered again once the lease ends.
        let deleted = batch
            .shards
            .iter()
            .map(|shard| shard.delete_ids.len() as u64)
            .sum();
        let drainer = &self.drainer;
        drainer
            .completer()
            .hand_off(|| drainer.completer_parts(), batch, self.lease_until);
        Ok(CommitOutcome {
            deleted,
            ..CommitOutcome::default()
        })
    }

    /// Adds a commit's results to the report and the metrics.
    fn tally(&self, report: &mut DrainReport, outcome: &CommitOutcome, results: Vec<Finished>) {
        report.rows_deleted += outcome.deleted;
        report.dead_lettered += outcome.dead_lettered;
        observe::claims_lost(
            self.kind,
            outcome.lost.len(),
            "the lease expired before the commit",
        );
        for finished in results {
            if outcome.lost.contains(&finished.shard) {
                report.lost_claims.push(finished.shard);
            } else {
                for (category, rows) in &finished.delivered {
                    observe::processed(category, self.kind, self.synchronous, *rows);
                }
                observe::culled(self.kind, finished.culled);
                report.deliveries += finished.delivered.len();
                report.culled += finished.culled;
                report.backing_off += usize::from(finished.backing_off);
                if finished.gave_up {
                    // Delivered in part: the rest is delivered by the next
                    // claim.
                    report.lost_claims.push(finished.shard);
                }
            }
            report.failures.extend(finished.failures);
        }
    }
}

/// A delivery task: takes shards from the queue and delivers them, one
/// after the other, until the queue is empty.
async fn deliver_queue<C: Category>(
    drainer: Engine<C>,
    queue: Queue,
    outcomes: mpsc::UnboundedSender<ShardOutcome>,
    lease: LeaseEnd,
    synchronous: bool,
    stack: Arc<Vec<ShardKey>>,
) {
    loop {
        let Some(claimed) = lock(&queue).pop_front() else {
            return;
        };
        let outcome = deliver_shard(&drainer, claimed, &lease, synchronous, stack.clone()).await;
        if outcomes.send(outcome).is_err() {
            return;
        }
    }
}
