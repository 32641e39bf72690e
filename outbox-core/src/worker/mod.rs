//! The background drain: a worker that runs drain rounds for as long as the
//! process lives, written against the store traits and a wake-up source.
//!
//! It delivers what synchronous flushes did not: rows of units of work that
//! opted out (`flush = false`), rows whose flush failed, retries after
//! backoff, rows written outside any request.
//!
//! - After a round has committed its first finished shards, the next round
//!   starts, while the first still waits for its slow receivers (at most
//!   [`WorkerBuilder::rounds_in_flight`] at once).
//! - When nothing is due, a loop sleeps until woken: by this process (a
//!   [`Waker`]), by another process (a [`WakeSource`], such as PostgreSQL
//!   `LISTEN`), or by its poll interval, whichever comes first. Under load
//!   (its last claim took [`GATHER_FROM_SHARDS`] shards or more) a wake-up
//!   waits out the gather window first ([`WorkerBuilder::gather`]), so that
//!   the rows committed meanwhile go to one claim. When other rounds were in
//!   flight as its claim began, the end of one of them wakes it too: the rows
//!   of the buckets they held were passed over.
//! - When the store fails, rounds are retried with doubling delays (100 ms up
//!   to 30 s); when the wake-up source fails, the worker says so once and
//!   polls until it is back.
//! - Claims of rounds that stopped half-way are ended before the next round
//!   ([`Drainer::release_abandoned`]).
//! - [`WorkerHandle::shutdown`] stops claiming, lets the rounds in flight
//!   finish within the shutdown bound, cancels those still running then and
//!   ends their claims, so that another process can take their shards at
//!   once. It is built on tokio-util's `CancellationToken` and `TaskTracker`;
//!   tasks of your own can join it with [`WorkerHandle::spawn`].
//!
//! ```
//! outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 } }
//! use outbox_core::worker::WorkerBuilder;
//! use outbox_core::{Drainer, MemoryStore, OutboxKind, Receivers, ShardKey};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let drainer = Drainer::new(store.clone(), Receivers::new().discard(OutboxCategory::OrgUpdate));
//! let worker = WorkerBuilder::new(drainer).spawn();
//! worker.ready().await;
//!
//! store.write(&ShardKey::region(OutboxScope::OrgScope, 1), OutboxCategory::OrgUpdate, 1, None);
//! worker.waker().wake(OutboxKind::Region).await; // or wait for the poll
//! # while !store.rows(OutboxKind::Region).is_empty() { tokio::task::yield_now().await; }
//! worker.shutdown().await;
//! # });
//! ```

mod gather;
mod run;
mod wake;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use gather::GATHER_FROM_SHARDS;
pub use wake::{Notifier, WakeSource, Waker, Wakeup};

use crate::drain::Drainer;
use crate::registry::Category;
use crate::shard::OutboxKind;
use run::Shared;

/// Default time an idle drain waits before looking again: 1 s.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Default bound on a graceful shutdown: 10 s.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time between two updates of the backlog gauges: 15 s.
pub const DEFAULT_GAUGE_INTERVAL: Duration = Duration::from_secs(15);
/// Default rounds of one kind in flight at once: 4 (a new one starts when the
/// last has committed its first shards).
pub const DEFAULT_ROUNDS_IN_FLIGHT: usize = 4;
/// Default gather window under load: 4 ms (see [`WorkerBuilder::gather`]).
pub const DEFAULT_GATHER: Duration = Duration::from_millis(4);

/// Builds and spawns a background drain.
pub struct WorkerBuilder<C: Category> {
    drainer: Drainer<C>,
    kinds: Vec<OutboxKind>,
    poll_interval: Duration,
    shutdown_timeout: Duration,
    rounds_in_flight: usize,
    gather: Duration,
    gauge_interval: Option<Duration>,
    history_retention: Option<Duration>,
    wake_source: Option<Box<dyn WakeSource>>,
    waker: Waker,
}

impl<C: Category> std::fmt::Debug for WorkerBuilder<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("kinds", &self.kinds)
            .field("poll_interval", &self.poll_interval)
            .field("rounds_in_flight", &self.rounds_in_flight)
            .finish_non_exhaustive()
    }
}

impl<C: Category> WorkerBuilder<C> {
    /// A worker that drains through `drainer`.
    pub fn new(drainer: Drainer<C>) -> Self {
        Self {
            drainer,
            kinds: OutboxKind::ALL.to_vec(),
            poll_interval: DEFAULT_POLL_INTERVAL,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            rounds_in_flight: DEFAULT_ROUNDS_IN_FLIGHT,
            gather: DEFAULT_GATHER,
            gauge_interval: Some(DEFAULT_GAUGE_INTERVAL),
            history_retention: Some(crate::history::DEFAULT_RETENTION),
            wake_source: None,
            waker: Waker::new(),
        }
    }

    /// The outbox kinds this worker drains. Default: both.
    pub fn kinds(mut self, kinds: impl IntoIterator<Item = OutboxKind>) -> Self {
        self.kinds = kinds.into_iter().collect();
        self
    }

    /// How long an idle drain waits before looking again when nothing wakes
    /// it. Default: 1 s.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// The bound on a graceful shutdown. Default: 10 s.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// Rounds of one kind in flight at once (at least 1). Default: 4.
    pub fn rounds_in_flight(mut self, rounds: usize) -> Self {
        self.rounds_in_flight = rounds.max(1);
        self
    }

    /// The gather window under load: after a claim that took
    /// [`GATHER_FROM_SHARDS`] shards or more, the next claim woken by new
    /// rows starts no sooner than this after it started, so that the rows
    /// committed meanwhile cost one claim, not one each. Under light load
    /// (fewer shards per claim) a claim follows its wake-up at once.
    /// `Duration::ZERO` claims at every wake-up. Default: 4 ms.
    pub fn gather(mut self, window: Duration) -> Self {
        self.gather = window;
        self
    }

    /// How often the worker updates the backlog gauges of
    /// [`crate::metrics`] (four reads per kind); `None` turns them off.
    /// Default: every 15 s.
    pub fn gauge_interval(mut self, interval: Option<Duration>) -> Self {
        self.gauge_interval = interval.map(|interval| interval.max(Duration::from_millis(1)));
        self
    }

    /// How long the history samples this worker records with each gauge
    /// update are kept (see [`crate::history`]); `None` records none.
    /// Default: 24 h.
    pub fn history_retention(mut self, retention: Option<Duration>) -> Self {
        self.history_retention = retention;
        self
    }

    /// Wake-ups from other processes. Default: none (in-process wake-ups and
    /// polling only).
    pub fn wake_source(mut self, source: impl WakeSource) -> Self {
        self.wake_source = Some(Box::new(source));
        self
    }

    /// The waker this worker listens to (to share one with a layer built
    /// before the worker). Default: a new one, without notifier.
    pub fn waker(mut self, waker: Waker) -> Self {
        self.waker = waker;
        self
    }

    /// Starts the drain loops (and the wake-up listener) on the current tokio
    /// runtime.
    pub fn spawn(self) -> WorkerHandle<C> {
        let stop = CancellationToken::new();
        let cut_off = CancellationToken::new();
        let rounds = TaskTracker::new();
        let tasks = TaskTracker::new();
        let (ready_tx, ready) = watch::channel(0usize);
        let (in_flight, rounds_in_flight) = watch::channel(0usize);
        let shared = Shared {
            drainer: self.drainer.clone(),
            waker: self.waker.clone(),
            poll_interval: self.poll_interval,
            gather: self.gather,
            stop: stop.clone(),
            cut_off: cut_off.clone(),
            rounds: rounds.clone(),
            ready: Arc::new(ready_tx),
            in_flight: Arc::new(in_flight),
        };
        // Buckets a flush released may hold rows that requests left to
        // the drain while the flush was completing.
        let waker = self.waker.clone();
        self.drainer
            .on_flushes_completed(move |kind| waker.wake_local(kind));
        crate::drain::observe::register_series::<C>(&self.kinds);
        let mut parts = 0;
        let drainer = self.drainer.clone();
        tasks.spawn(async move {
            if let Err(error) = drainer.operator().release_orphaned_pauses().await {
                tracing::warn!(%error, "could not look for shards parked by a pause that is gone; they wait for the next resume");
            }
        });
        for &kind in &self.kinds {
            let in_flight = Arc::new(Semaphore::new(self.rounds_in_flight));
            tasks.spawn(run::drain_loop(shared.clone(), kind, in_flight));
            parts += 1;
        }
        if let Some(source) = self.wake_source {
            tasks.spawn(run::wake_loop(shared.clone(), source));
            parts += 1;
        }
        if let Some(interval) = self.gauge_interval {
            tasks.spawn(run::gauge_loop(
                shared.clone(),
                self.kinds.clone(),
                interval,
                self.history_retention,
            ));
            parts += 1;
        }
        tracing::info!(kinds = ?self.kinds, "outbox worker started");
        WorkerHandle {
            drainer: self.drainer,
            waker: self.waker,
            stop,
            cut_off,
            rounds,
            tasks,
            shutdown_timeout: self.shutdown_timeout,
            ready,
            parts,
            kinds: self.kinds,
            rounds_in_flight,
        }
    }
}

/// Why [`WorkerHandle::settled`] returned before the outbox settled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SettleError {
    /// The store could not say what is due.
    #[error("could not tell whether outbox rows are due: {0}")]
    Store(#[from] crate::StoreError),
    /// The worker stopped first.
    #[error(transparent)]
    Stopped(NotSettled),
}

/// The worker stopped before its outbox settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the outbox worker stopped before its outbox settled")]
pub struct NotSettled;

/// A running background drain.
pub struct WorkerHandle<C: Category> {
    drainer: Drainer<C>,
    waker: Waker,
    stop: CancellationToken,
    cut_off: CancellationToken,
    rounds: TaskTracker,
    tasks: TaskTracker,
    shutdown_timeout: Duration,
    ready: watch::Receiver<usize>,
    parts: usize,
    kinds: Vec<OutboxKind>,
    rounds_in_flight: watch::Receiver<usize>,
}

impl<C: Category> std::fmt::Debug for WorkerHandle<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerHandle")
            .field("tasks", &self.tasks.len())
            .field("rounds", &self.rounds.len())
            .finish_non_exhaustive()
    }
}

impl<C: Category> WorkerHandle<C> {
    /// The drainer (for flushes outside HTTP, inspection, tests).
    pub fn drainer(&self) -> &Drainer<C> {
        &self.drainer
    }

    /// The waker of this worker's loops: wake it after committing rows it
    /// should deliver.
    pub fn waker(&self) -> &Waker {
        &self.waker
    }

    /// Cancelled when the worker begins to shut down: wire other shutdowns
    /// to it, or tasks of your own.
    pub fn stopping(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Runs a task of your own as part of the worker (a periodic job, say):
    /// it gets a token cancelled at shutdown, and shutdown waits for it
    /// within its bound.
    pub fn spawn<F, Fut>(&self, task: F)
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.tasks.spawn(task(self.stop.clone()));
    }

    /// Waits until every drain loop has gone idle once (found nothing due)
    /// and the wake-up source, if any, is connected or has been found
    /// unavailable (the worker then polls): from then on, a commit's wake-up
    /// is not missed. The backlog gauges, if on, have been published (or
    /// found unmeasurable) once. Readiness probes and tests use it.
    pub async fn ready(&self) {
        let mut ready = self.ready.clone();
        let parts = self.parts;
        let _ = ready.wait_for(|count| *count >= parts).await;
    }

    /// Waits until this worker has nothing left to do now: no round in
    /// flight, no synchronous flush's completion pending
    /// ([`Drainer::settled`]), and no row of its kinds due in a shard that
    /// is free and not backing off (what a round would find). Rows due
    /// meanwhile are claimed at once (the wait wakes the loops rather than
    /// leave them to the poll). What it does not wait for: rows scheduled
    /// later (a backoff, a pause), and shards another process holds.
    ///
    /// Tests of the background drain, and a shutdown that should deliver
    /// what is due first, wait on it instead of polling the tables. It
    /// waits for as long as it takes: bound it with `tokio::time::timeout`
    /// (as `outbox_testing::settled` does).
    ///
    /// # Errors
    ///
    /// [`SettleError::Store`] when the store cannot say what is due;
    /// [`SettleError::Stopped`] when the worker stops first.
    pub async fn settled(&self) -> Result<(), SettleError> {
        let mut rounds = self.rounds_in_flight.clone();
        loop {
            // A stopped worker settles nothing: said first, whatever else
            // is ready at the same time.
            if self.stop.is_cancelled() {
                return Err(SettleError::Stopped(NotSettled));
            }
            self.drainer.settled().await;
            tokio::select! {
                biased;
                () = self.stop.cancelled() => return Err(SettleError::Stopped(NotSettled)),
                idle = rounds.wait_for(|count| *count == 0) => {
                    if idle.is_err() {
                        return Err(SettleError::Stopped(NotSettled));
                    }
                }
            }
            let mut due = Vec::new();
            for &kind in &self.kinds {
                if self.drainer.view().has_due(kind).await? {
                    due.push(kind);
                }
            }
            if due.is_empty() {
                // Nothing due, and nothing started while it was asked.
                if *rounds.borrow() == 0 && !self.stop.is_cancelled() {
                    return Ok(());
                }
                continue;
            }
            // Mark what is seen now, then wake the loops: the round a
            // wake-up starts changes the count.
            rounds.borrow_and_update();
            for kind in due {
                self.waker.wake_local(kind);
            }
            tokio::select! {
                biased;
                () = self.stop.cancelled() => return Err(SettleError::Stopped(NotSettled)),
                changed = rounds.changed() => {
                    if changed.is_err() {
                        return Err(SettleError::Stopped(NotSettled));
                    }
                }
            }
        }
    }

    /// Stops claiming, lets the rounds in flight finish within the shutdown
    /// timeout, cancels the rounds still running then and ends their claims
    /// (another process may take those shards at once; their rows are
    /// delivered again, at least once).
    pub async fn shutdown(self) {
        self.stop.cancel();
        self.tasks.close();
        self.rounds.close();
        let all = async {
            self.tasks.wait().await;
            self.rounds.wait().await;
        };
        if tokio::time::timeout(self.shutdown_timeout, all)
            .await
            .is_err()
        {
            tracing::warn!(
                timeout = ?self.shutdown_timeout,
                "outbox worker did not stop in time; cancelling its rounds and releasing their claims"
            );
            // Cancelled rounds drop their futures, which files their claims.
            self.cut_off.cancel();
            let _ = tokio::time::timeout(self.shutdown_timeout, self.rounds.wait()).await;
        }
        // Flushes delivered but not completed yet: their rows would be
        // delivered again after their leases.
        if tokio::time::timeout(self.shutdown_timeout, self.drainer.settled())
            .await
            .is_err()
        {
            tracing::warn!("synchronous outbox flushes were still completing at shutdown; their rows are delivered again after their leases");
        }
        if self.drainer.has_abandoned() {
            match tokio::time::timeout(self.shutdown_timeout, self.drainer.release_abandoned())
                .await
            {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => {
                    tracing::warn!(%error, "could not release the claims of cancelled outbox rounds; they expire after their lease")
                }
                Err(_) => tracing::warn!(
                    "releasing the claims of cancelled outbox rounds timed out; they expire after their lease"
                ),
            }
        }
        tracing::info!("outbox worker stopped");
    }
}
