//! Running one claim: deliveries, their commits, and keeping the claim alive.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};

use super::abandoned::{AbandonedClaim, ClaimGuard};
use super::deliver::{deliver_shard, is_backing_off, ShardOutcome};
use super::drainer::{to_chrono, Drainer, RoundStarted, DELIVERING};
use super::observe;
use super::report::{DrainReport, ShardFailure};
use crate::registry::Category;
use crate::shard::{OutboxKind, ShardKey};
use crate::store::{ClaimRequest, ClaimedShard, CommitBatch, StoreError};

/// A claim being worked through.
///
/// Its shards are delivered concurrently (`concurrency` at a time), each in
/// its own task, so that commits and renewals never pause a receiver. What
/// finishes is committed together; but finished shards wait at most
/// `commit_interval` for the slower ones, then commit on their own and free
/// their buckets, so that one slow receiver keeps its own bucket and not the
/// whole claim's. Every third of the lease the claim is renewed; if it cannot
/// be, the deliveries still running are cancelled before the lease ends, so
/// that no other worker can take a shard while a receiver still works on it
/// (rule 3).
pub(crate) struct Round<C: Category> {
    drainer: Drainer<C>,
    kind: OutboxKind,
    token: i64,
    lease_until: DateTime<Utc>,
    synchronous: bool,
}

/// A finished shard's results, kept for the report while its commit is sent.
struct Finished {
    shard: ShardKey,
    delivered: Vec<(&'static str, usize)>,
    culled: usize,
    failures: Vec<ShardFailure>,
    backing_off: bool,
}

/// The shards of a claim that are not finished.
#[derive(Default)]
struct Pending {
    queue: VecDeque<ClaimedShard>,
    running: HashMap<tokio::task::Id, ShardKey>,
}

impl Pending {
    fn shards(&self) -> Vec<ShardKey> {
        self.running
            .values()
            .cloned()
            .chain(self.queue.iter().map(|claimed| claimed.shard.clone()))
            .collect()
    }
}

impl<C: Category> Round<C> {
    pub(crate) fn new(drainer: Drainer<C>, request: &ClaimRequest, synchronous: bool) -> Self {
        Self {
            drainer,
            kind: request.kind,
            token: request.token,
            lease_until: request.lease_until,
            synchronous,
        }
    }

    /// Delivers and commits `shards`. `started` hears once the first commit
    /// is done.
    pub(crate) async fn run(
        mut self,
        shards: Vec<ClaimedShard>,
        mut started: Option<RoundStarted>,
    ) -> Result<DrainReport, StoreError> {
        let claimed = shards.len();
        let mut report = DrainReport {
            shards: claimed,
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
        let stack: Arc<Vec<ShardKey>> = DELIVERING.try_with(Arc::clone).unwrap_or_default();
        let mut finished = Vec::new();
        let mut pending = Pending::default();
        for shard in shards {
            match shard.state.as_ref() {
                Some(state) if is_backing_off(&self.drainer, &shard) => {
                    finished.push(ShardOutcome::waiting(shard.shard.clone(), state));
                }
                _ => pending.queue.push_back(shard),
            }
        }
        let mut tasks = JoinSet::new();
        self.start_deliveries(&mut pending, &mut tasks, &stack);

        let config = *self.drainer.config();
        let mut heartbeat =
            tokio::time::interval_at(Instant::now() + config.heartbeat(), config.heartbeat());
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut give_up_at = self.give_up_at();
        let mut wave: Option<Instant> = None;
        while !tasks.is_empty() {
            tokio::select! {
                joined = tasks.join_next_with_id() => {
                    match joined {
                        Some(Ok((id, outcome))) => {
                            pending.running.remove(&id);
                            finished.push(outcome);
                        }
                        Some(Err(error)) => {
                            // Receivers' panics are caught inside the task:
                            // this is the engine's own, and its shard simply
                            // stays uncommitted, for the next claim.
                            pending.running.remove(&error.id());
                            tracing::error!(%error, "outbox delivery task failed");
                        }
                        None => {}
                    }
                    self.start_deliveries(&mut pending, &mut tasks, &stack);
                    if wave.is_none() && !tasks.is_empty() && !finished.is_empty() {
                        wave = Some(Instant::now() + config.commit_interval);
                    }
                }
                () = sleep_until_some(wave) => {
                    wave = None;
                    let done = std::mem::take(&mut finished);
                    self.commit(&mut report, done, pending.shards(), &mut guard).await?;
                    give_up_at = self.give_up_at();
                    signal(&mut started, claimed);
                }
                _ = heartbeat.tick() => {
                    if self.renew(&mut guard).await {
                        give_up_at = self.give_up_at();
                    }
                }
                () = tokio::time::sleep_until(give_up_at) => {
                    // The claim could not be renewed in time: stop every
                    // receiver before the lease ends. Nothing is committed;
                    // the next owner delivers these shards again.
                    tasks.abort_all();
                    let lost: Vec<ShardKey> = pending
                        .shards()
                        .into_iter()
                        .chain(finished.iter().map(|outcome| outcome.commit.shard.clone()))
                        .collect();
                    observe::claims_lost(self.kind, lost.len(), "the claim could not be renewed");
                    report.lost_claims.extend(lost);
                    report
                        .failures
                        .extend(finished.into_iter().flat_map(|outcome| outcome.failures));
                    guard.finish();
                    signal(&mut started, claimed);
                    return Ok(report);
                }
            }
        }
        self.commit(&mut report, finished, Vec::new(), &mut guard)
            .await?;
        guard.finish();
        signal(&mut started, claimed);
        Ok(report)
    }

    fn start_deliveries(
        &self,
        pending: &mut Pending,
        tasks: &mut JoinSet<ShardOutcome>,
        stack: &Arc<Vec<ShardKey>>,
    ) {
        while tasks.len() < self.drainer.config().concurrency {
            let Some(claimed) = pending.queue.pop_front() else {
                return;
            };
            let shard = claimed.shard.clone();
            let handle = tasks.spawn(deliver_shard(
                self.drainer.clone(),
                claimed,
                self.synchronous,
                stack.clone(),
            ));
            pending.running.insert(handle.id(), shard);
        }
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
                true
            }
            Ok(_) => {
                self.lease_until = until;
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
        let outcome = self.drainer.store().commit(&batch).await?;
        if !batch.in_flight.is_empty() {
            self.lease_until = batch.renew_until;
            guard.renewed(batch.renew_until);
        }
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
            }
            report.failures.extend(finished.failures);
        }
        Ok(())
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn signal(started: &mut Option<RoundStarted>, claimed: usize) {
    if let Some(started) = started.take() {
        let _ = started.send(Ok(claimed));
    }
}
