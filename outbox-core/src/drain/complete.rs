//! The completer: ends finished synchronous flushes in the background, many
//! in one statement, so that a response waits for its receivers only.
//!
//! A synchronous flush that claimed its shards before its transaction
//! committed delivers right after the commit. What is left then is to delete
//! the delivered rows and release the buckets; nothing the client waits for
//! depends on it. So the flush hands that commit to its drainer's completer
//! and returns. The completer sends whatever flushes finished meanwhile in
//! one [`DrainStore::complete`] (one statement on PostgreSQL, without waiting
//! for the WAL flush), fenced by each flush's token.
//!
//! The lease covers the gap: until the completion lands, the buckets stay
//! leased to the flush's token, so no other worker takes their shards. If the
//! process dies first, or the statement fails, the leases run out (or are
//! ended early, see [`Abandoned`]) and the rows are delivered again (rule 6,
//! at least once). Only the common end goes this way: a flush with a failure,
//! a dead letter or a culled shard commits at once, as a round does.
//!
//! After each completion the completer calls the drainer's release hook for
//! the kinds it released buckets of (the worker sets it to wake its drain): a
//! request that found a bucket held by a flush still completing left its
//! rows to the background drain, which can take them now.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, watch, Notify};

use super::abandoned::{Abandoned, AbandonedClaim};
use super::observe;
use crate::clock::Clock;
use crate::shard::OutboxKind;
use crate::store::{CommitBatch, DrainStore};

/// At most this many flushes go in one completion: 256.
const MAX_PER_COMPLETION: usize = 256;

/// Called with a kind after a completion released buckets of it.
pub(crate) type ReleaseHook = Arc<dyn Fn(OutboxKind) + Send + Sync>;

/// A finished flush waiting for its completion.
struct Handoff {
    batch: CommitBatch,
    lease_until: DateTime<Utc>,
    /// Its place in the order of hand-offs (from 1).
    sequence: u64,
}

/// What the completer's task shares with its drainers.
#[derive(Default)]
struct Progress {
    /// Flushes handed off and not completed yet.
    pending: AtomicUsize,
    /// Told when `pending` drops to zero.
    settled: Notify,
    /// A flush found a bucket held and left rows to the background drain
    /// since the last completion: the release hook is called after the next
    /// one (not after every one: waking the drain costs it a claim).
    held_found: AtomicBool,
    /// The last hand-off's sequence.
    handed: AtomicU64,
    /// The sequence up to which every hand-off is completed (or failed).
    completed: watch::Sender<u64>,
    /// Every bucket a hand-off of this process leased, with the sequence of
    /// the last such hand-off: its lease waits for that completion while the
    /// sequence is above `completed`, and was released by it once not. (At
    /// most one entry per bucket: the map stays as small as the buckets.)
    buckets: Mutex<HashMap<(OutboxKind, i32), u64>>,
}

/// A drainer's completer, shared by its clones. Its task starts on first
/// use, on the runtime that uses it, and ends when the last clone is gone.
#[derive(Default)]
pub(crate) struct Completer {
    sender: Mutex<Option<mpsc::UnboundedSender<Handoff>>>,
    progress: Arc<Progress>,
    on_release: Arc<Mutex<Option<ReleaseHook>>>,
}

impl std::fmt::Debug for Completer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completer")
            .field("pending", &self.progress.pending.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

/// What the completer's task needs from its drainer.
pub(crate) struct CompleterParts {
    pub(crate) store: Arc<dyn DrainStore>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) abandoned: Arc<Abandoned>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Completer {
    /// Sets what to call after a completion released buckets.
    pub(crate) fn on_release(&self, hook: ReleaseHook) {
        *lock(&self.on_release) = Some(hook);
    }

    /// Hands a finished flush's commit over; it is applied soon, fenced by
    /// its token. `lease_until` is when its leases end unless completed.
    pub(crate) fn hand_off(
        &self,
        parts: impl FnOnce() -> CompleterParts,
        batch: CommitBatch,
        lease_until: DateTime<Utc>,
    ) {
        self.progress.pending.fetch_add(1, Ordering::SeqCst);
        let mut sender = lock(&self.sender);
        let sequence = self.progress.handed.fetch_add(1, Ordering::SeqCst) + 1;
        {
            let mut buckets = lock(&self.progress.buckets);
            for shard in &batch.shards {
                buckets.insert((batch.kind, shard.shard.bucket()), sequence);
            }
        }
        let mut handoff = Handoff {
            batch,
            lease_until,
            sequence,
        };
        if let Some(running) = sender.as_ref() {
            match running.send(handoff) {
                Ok(()) => return,
                // Its runtime is gone (a test's runtime dropped): start a
                // new task on this one.
                Err(returned) => handoff = returned.0,
            }
        }
        let (send, receive) = mpsc::unbounded_channel();
        tokio::spawn(run(
            receive,
            parts(),
            self.progress.clone(),
            self.on_release.clone(),
        ));
        // The receiver is alive: it was just created.
        let _ = send.send(handoff);
        *sender = Some(send);
    }

    /// Calls the release hook for `kind` now (a round ended with work left
    /// in its buckets).
    pub(crate) fn released(&self, kind: OutboxKind) {
        let hook = lock(&self.on_release).clone();
        if let Some(hook) = hook {
            hook(kind);
        }
    }

    /// Notes that a flush left the rows of a held bucket to the background
    /// drain: the next completion wakes it.
    pub(crate) fn held_found(&self) {
        self.progress.held_found.store(true, Ordering::SeqCst);
    }

    /// The hand-off whose completion will release `bucket` of `kind`, if
    /// one waits for it in this process.
    pub(crate) fn releasing(&self, kind: OutboxKind, bucket: i32) -> Option<u64> {
        let sequence = lock(&self.progress.buckets).get(&(kind, bucket)).copied()?;
        (sequence > self.completed_through()).then_some(sequence)
    }

    /// Whether a completion since the hand-off `since` (the sequence
    /// completed through then) released `bucket` of `kind`: a flush that
    /// found the bucket held may find it free now. A bucket another
    /// process holds, or one this process's flushes released before, says
    /// no, however many other buckets were released meanwhile.
    pub(crate) fn released_since(&self, kind: OutboxKind, bucket: i32, since: u64) -> bool {
        let completed = self.completed_through();
        lock(&self.progress.buckets)
            .get(&(kind, bucket))
            .is_some_and(|&sequence| sequence > since && sequence <= completed)
    }

    /// The sequence up to which hand-offs are completed (or failed).
    pub(crate) fn completed_through(&self) -> u64 {
        *self.progress.completed.borrow()
    }

    /// Waits until the hand-off `sequence` is completed (or failed).
    pub(crate) async fn completed(&self, sequence: u64) {
        let mut completed = self.progress.completed.subscribe();
        let _ = completed.wait_for(|done| *done >= sequence).await;
    }

    /// Waits until every flush handed off so far is completed (or failed).
    pub(crate) async fn settled(&self) {
        loop {
            let notified = self.progress.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.progress.pending.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// The completer's task: one completion per kind for whatever is waiting.
async fn run(
    mut receive: mpsc::UnboundedReceiver<Handoff>,
    parts: CompleterParts,
    progress: Arc<Progress>,
    hook: Arc<Mutex<Option<ReleaseHook>>>,
) {
    let mut waiting = Vec::new();
    while let Some(first) = receive.recv().await {
        waiting.push(first);
        while waiting.len() < MAX_PER_COMPLETION {
            match receive.try_recv() {
                Ok(next) => waiting.push(next),
                Err(_) => break,
            }
        }
        let count = waiting.len();
        let last = waiting
            .iter()
            .map(|handoff| handoff.sequence)
            .max()
            .unwrap_or(0);
        let wake = progress.held_found.swap(false, Ordering::SeqCst);
        for kind in OutboxKind::ALL {
            let (of_kind, rest): (Vec<Handoff>, Vec<Handoff>) = waiting
                .drain(..)
                .partition(|handoff| handoff.batch.kind == kind);
            waiting = rest;
            if !of_kind.is_empty() {
                complete(&parts, kind, of_kind).await;
                let hook = lock(&hook).clone();
                if let Some(hook) = hook.filter(|_| wake) {
                    hook(kind);
                }
            }
        }
        progress
            .completed
            .send_modify(|done| *done = (*done).max(last));
        if progress.pending.fetch_sub(count, Ordering::SeqCst) == count {
            progress.settled.notify_waiters();
        }
    }
}

async fn complete(parts: &CompleterParts, kind: OutboxKind, handoffs: Vec<Handoff>) {
    let now = parts.clock.now();
    let (batches, leases): (Vec<CommitBatch>, Vec<DateTime<Utc>>) = handoffs
        .into_iter()
        .map(|mut handoff| {
            handoff.batch.now = now;
            (handoff.batch, handoff.lease_until)
        })
        .unzip();
    match parts.store.complete(&batches).await {
        Ok(outcomes) => {
            let lost: usize = outcomes.iter().map(|outcome| outcome.lost.len()).sum();
            observe::claims_lost(kind, lost, "the lease expired before the flush completed");
        }
        Err(error) => {
            tracing::warn!(
                %error,
                flushes = batches.len(),
                kind = kind.as_str(),
                "could not complete synchronous outbox flushes; their rows are delivered again \
                 once their claims are released"
            );
            for (batch, lease_until) in batches.iter().zip(leases) {
                parts.abandoned.push(AbandonedClaim {
                    kind,
                    token: batch.token,
                    lease_until,
                });
            }
        }
    }
}
