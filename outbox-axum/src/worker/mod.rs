//! The background drain, spawned at startup.
//!
//! It delivers what the synchronous flush did not: rows of requests that
//! opted out (`flush = false`), rows whose flush failed, retries after backoff,
//! rows written outside any request. Each kind gets its drain loop(s):
//!
//! - after a round that did work, the next starts at once;
//! - when idle, a loop sleeps until woken: by an in-process commit (the
//!   layer's [`OutboxWaker`]), by PostgreSQL `NOTIFY` from another process, or
//!   by its poll interval, whichever comes first;
//! - when the database goes away, rounds fail and the loop retries with
//!   doubling delays (100 ms up to 30 s); the connection pool and the
//!   `LISTEN` connection reconnect by themselves, no operator needed;
//! - with [`OutboxWorkerBuilder::backfill`], it also runs a backfill tick at
//!   start and then once a minute;
//! - claims left by rounds that stopped half-way (a synchronous flush whose
//!   client went away, a store error) are ended before the next round
//!   ([`Drainer::release_abandoned`]), so their shards wait for no lease;
//! - on shutdown it stops claiming, lets the rounds in flight finish (bounded
//!   by [`OutboxWorkerBuilder::shutdown_timeout`]), cancels those cut off at
//!   the bound and releases their claims, so that another process can take
//!   their shards at once.
//!
//! ```no_run
//! outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 } }
//! use axum::Router;
//! use outbox_axum::OutboxWorker;
//! use outbox_core::Receivers;
//!
//! # async fn run(db: sea_orm::DatabaseConnection) -> Result<(), Box<dyn std::error::Error>> {
//! let receivers = Receivers::new().discard(OutboxCategory::OrgUpdate);
//! let worker = OutboxWorker::builder(db.clone(), receivers).spawn()?;
//! let app: Router = Router::new().layer(worker.layer());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! // Ctrl-C needs tokio's `signal` feature.
//! axum::serve(listener, app)
//!     .with_graceful_shutdown(async { let _ = tokio::signal::ctrl_c().await; })
//!     .await?;
//! worker.shutdown().await;
//! # Ok(()) }
//! ```

mod waker;

use std::sync::Arc;
use std::time::Duration;

use sea_orm::{DatabaseConnection, DbBackend};
use tokio::sync::watch;
use tokio::task::JoinSet;

use outbox_core::{
    Category, Clock, DeadLetterPolicy, DrainConfig, Drainer, IncompleteReceivers, KillSwitch,
    OutboxKind, Receivers,
};
use outbox_seaorm::backfill::Backfill;
use outbox_seaorm::listener::{OutboxListener, Wakeup};
use outbox_seaorm::{SeaOrmStore, UnsupportedBackend};

pub use waker::OutboxWaker;

use crate::layer::OutboxLayer;

/// Default time an idle drain waits before looking again: 1 s.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Default bound on a graceful shutdown: 10 s.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);
/// Default drain loops per kind: 1 (each delivers many shards at once).
pub const DEFAULT_LOOPS_PER_KIND: usize = 1;
/// Default time between two backfill ticks: 60 s (the backfill budget is per
/// minute).
pub const DEFAULT_BACKFILL_INTERVAL: Duration = Duration::from_secs(60);
const FIRST_ERROR_DELAY: Duration = Duration::from_millis(100);
const MAX_ERROR_DELAY: Duration = Duration::from_secs(30);

/// Why the worker did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// A live category has no receiver: its rows would hold their shards.
    #[error(transparent)]
    IncompleteReceivers(#[from] IncompleteReceivers),
    /// The database is not PostgreSQL or SQLite.
    #[error(transparent)]
    UnsupportedBackend(#[from] UnsupportedBackend),
}

/// Builds and spawns the background drain.
pub struct OutboxWorkerBuilder<C: Category> {
    db: DatabaseConnection,
    receivers: Receivers<C>,
    config: DrainConfig,
    poll_interval: Duration,
    shutdown_timeout: Duration,
    kinds: Vec<OutboxKind>,
    loops_per_kind: usize,
    listen: bool,
    kill_switch: KillSwitch,
    clock: Option<Arc<dyn Clock>>,
    backfill: Option<Arc<Backfill>>,
    backfill_interval: Duration,
    dead_letters: DeadLetterPolicy,
}

/// The background drain.
pub struct OutboxWorker;

impl OutboxWorker {
    /// A builder over `db` delivering to `receivers`.
    pub fn builder<C: Category>(
        db: DatabaseConnection,
        receivers: Receivers<C>,
    ) -> OutboxWorkerBuilder<C> {
        OutboxWorkerBuilder {
            db,
            receivers,
            config: DrainConfig::default(),
            poll_interval: DEFAULT_POLL_INTERVAL,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            kinds: OutboxKind::ALL.to_vec(),
            loops_per_kind: DEFAULT_LOOPS_PER_KIND,
            listen: true,
            kill_switch: KillSwitch::new(),
            clock: None,
            backfill: None,
            backfill_interval: DEFAULT_BACKFILL_INTERVAL,
            dead_letters: DeadLetterPolicy::new(),
        }
    }
}

impl<C: Category> OutboxWorkerBuilder<C> {
    /// The drain's tuning (batch size, shards per claim, concurrency, lease,
    /// delivery timeout, backoff). Default: [`DrainConfig::default`].
    pub fn drain_config(mut self, config: DrainConfig) -> Self {
        self.config = config;
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

    /// The outbox kinds this worker drains. Default: both.
    pub fn kinds(mut self, kinds: impl IntoIterator<Item = OutboxKind>) -> Self {
        self.kinds = kinds.into_iter().collect();
        self
    }

    /// Drain loops per kind (at least 1). Default: 1.
    pub fn loops_per_kind(mut self, loops: usize) -> Self {
        self.loops_per_kind = loops.max(1);
        self
    }

    /// Whether to `LISTEN` for wake-ups on PostgreSQL. Turn it off behind
    /// PgBouncer in transaction pooling mode. Default: on.
    pub fn listen(mut self, listen: bool) -> Self {
        self.listen = listen;
        self
    }

    /// Shares an operator kill switch with the drain. Default: none skipped.
    pub fn kill_switch(mut self, kill_switch: KillSwitch) -> Self {
        self.kill_switch = kill_switch;
        self
    }

    /// Runs `backfill` as part of the worker: one budgeted tick at start and
    /// then every `backfill_interval`. Default: no backfill.
    pub fn backfill(mut self, backfill: Backfill) -> Self {
        self.backfill = Some(Arc::new(backfill));
        self
    }

    /// The time between two backfill ticks. Default: 60 s.
    pub fn backfill_interval(mut self, interval: Duration) -> Self {
        self.backfill_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// Which scopes dead-letter a failing group, after how many attempts.
    /// Default: every scope retries forever.
    pub fn dead_letters(mut self, policy: DeadLetterPolicy) -> Self {
        self.dead_letters = policy;
        self
    }

    /// The clock of the drain (tests). Default: the system clock.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Starts the drain loops (and the `LISTEN` task on PostgreSQL).
    ///
    /// # Errors
    ///
    /// [`WorkerError::IncompleteReceivers`] when a live category has no
    /// receiver, naming it; [`WorkerError::UnsupportedBackend`] for a database
    /// other than PostgreSQL or SQLite.
    pub fn spawn(self) -> Result<WorkerHandle<C>, WorkerError> {
        self.receivers.ensure_complete()?;
        let store = SeaOrmStore::new(self.db.clone())?;
        let mut drainer = Drainer::new(store, self.receivers)
            .with_config(self.config)
            .with_kill_switch(self.kill_switch)
            .with_dead_letters(self.dead_letters);
        if let Some(clock) = self.clock {
            drainer = drainer.with_clock(SharedClock(clock));
        }
        let waker = OutboxWaker::new().with_notify(self.db.clone());
        let (stop, stopped) = watch::channel(false);
        let listens = self.listen && self.db.get_database_backend() == DbBackend::Postgres;
        let parts = self.kinds.len() * self.loops_per_kind + usize::from(listens);
        let (ready_tx, ready) = watch::channel(0usize);
        let ready_tx = Arc::new(ready_tx);
        let mut tasks = JoinSet::new();
        for &kind in &self.kinds {
            for _ in 0..self.loops_per_kind {
                tasks.spawn(drain_loop(
                    drainer.clone(),
                    kind,
                    waker.clone(),
                    self.poll_interval,
                    stopped.clone(),
                    ready_tx.clone(),
                ));
            }
        }
        if let Some(backfill) = &self.backfill {
            tasks.spawn(backfill_loop(
                self.db.clone(),
                backfill.clone(),
                self.backfill_interval,
                waker.clone(),
                stopped.clone(),
            ));
        }
        if listens {
            tasks.spawn(listen_loop(
                self.db.clone(),
                waker.clone(),
                stopped.clone(),
                ready_tx.clone(),
            ));
        }
        tracing::info!(kinds = ?self.kinds, loops = tasks.len(), "outbox worker started");
        Ok(WorkerHandle {
            backfill: self.backfill,
            db: self.db,
            drainer,
            waker,
            stop,
            tasks,
            shutdown_timeout: self.shutdown_timeout,
            ready,
            parts,
        })
    }
}

struct SharedClock(Arc<dyn Clock>);

impl Clock for SharedClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.0.now()
    }
}

/// A running background drain.
pub struct WorkerHandle<C: Category> {
    db: DatabaseConnection,
    drainer: Drainer<C>,
    waker: OutboxWaker,
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
    shutdown_timeout: Duration,
    ready: watch::Receiver<usize>,
    parts: usize,
    backfill: Option<Arc<Backfill>>,
}

impl<C: Category> std::fmt::Debug for WorkerHandle<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerHandle")
            .field("tasks", &self.tasks.len())
            .finish_non_exhaustive()
    }
}

impl<C: Category> WorkerHandle<C> {
    /// An [`OutboxLayer`] sharing this worker's drainer and waker: mount it on
    /// the router.
    pub fn layer(&self) -> OutboxLayer<C> {
        OutboxLayer::new(self.db.clone(), self.drainer.clone()).waker(self.waker.clone())
    }

    /// The drainer (for flushes outside HTTP, inspection, tests).
    pub fn drainer(&self) -> &Drainer<C> {
        &self.drainer
    }

    /// The backfill this worker runs, if any (for its status).
    pub fn backfill(&self) -> Option<&Arc<Backfill>> {
        self.backfill.as_ref()
    }

    /// The waker of this worker's loops.
    pub fn waker(&self) -> &OutboxWaker {
        &self.waker
    }

    /// Waits until every drain loop has gone idle once (found nothing due)
    /// and, on PostgreSQL, the `LISTEN` connection is up: from then on, a
    /// commit's wake-up is not missed. Readiness probes and tests use it.
    pub async fn ready(&self) {
        let mut ready = self.ready.clone();
        let parts = self.parts;
        let _ = ready.wait_for(|count| *count >= parts).await;
    }

    /// Stops claiming, lets the rounds in flight finish within the shutdown
    /// timeout, cancels the rounds still running then and releases their
    /// claims (another process may take those shards at once; their rows are
    /// delivered again, at least once). Wire it after
    /// `axum::serve(..).with_graceful_shutdown(..)` returns.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let mut tasks = self.tasks;
        let all = async { while tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(self.shutdown_timeout, all)
            .await
            .is_err()
        {
            tracing::warn!(
                timeout = ?self.shutdown_timeout,
                "outbox worker did not stop in time; cancelling its rounds and releasing their claims"
            );
            // Aborts the tasks and waits until they are gone: a cancelled
            // round has then dropped its future and filed its claims.
            let _ = tokio::time::timeout(self.shutdown_timeout, tasks.shutdown()).await;
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

async fn drain_loop<C: Category>(
    drainer: Drainer<C>,
    kind: OutboxKind,
    waker: OutboxWaker,
    poll_interval: Duration,
    mut stopped: watch::Receiver<bool>,
    ready: Arc<watch::Sender<usize>>,
) {
    let mut error_delay = FIRST_ERROR_DELAY;
    let mut announced = false;
    loop {
        if *stopped.borrow() {
            return;
        }
        if drainer.has_abandoned() {
            if let Err(error) = drainer.release_abandoned().await {
                tracing::warn!(%error, "could not release the claims of cancelled outbox rounds; retrying before the next round");
            }
        }
        // Registered before the round, so a wake-up during it is not lost.
        let notified = waker.notified(kind);
        tokio::pin!(notified);
        notified.as_mut().enable();
        let wait = match drainer.drain_due(kind).await {
            Ok(report) => {
                error_delay = FIRST_ERROR_DELAY;
                if !report.is_empty() {
                    continue;
                }
                poll_interval
            }
            Err(error) => {
                tracing::warn!(%error, kind = kind.as_str(), retry_in = ?error_delay, "outbox drain round failed");
                let wait = error_delay;
                error_delay = (error_delay * 2).min(MAX_ERROR_DELAY);
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stopped.changed() => {}
                }
                continue;
            }
        };
        if !announced {
            announced = true;
            ready.send_modify(|count| *count += 1);
        }
        tokio::select! {
            _ = &mut notified => {}
            _ = tokio::time::sleep(wait) => {}
            _ = stopped.changed() => {}
        }
    }
}

async fn backfill_loop(
    db: DatabaseConnection,
    backfill: Arc<Backfill>,
    interval: Duration,
    waker: OutboxWaker,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        if *stopped.borrow() {
            return;
        }
        match backfill.tick(&db).await {
            Ok(report) if report.backfilled > 0 => {
                for kind in OutboxKind::ALL {
                    waker.wake_local(kind);
                }
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "outbox backfill tick failed; retrying at the next tick")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stopped.changed() => return,
        }
    }
}

async fn listen_loop(
    db: DatabaseConnection,
    waker: OutboxWaker,
    mut stopped: watch::Receiver<bool>,
    ready: Arc<watch::Sender<usize>>,
) {
    let mut error_delay = FIRST_ERROR_DELAY;
    let mut announced = false;
    loop {
        if *stopped.borrow() {
            return;
        }
        let mut listener = match OutboxListener::connect(&db).await {
            Ok(Some(listener)) => listener,
            Ok(None) => return, // not PostgreSQL: polling and in-process wake-ups only
            Err(error) => {
                tracing::warn!(%error, retry_in = ?error_delay, "outbox LISTEN connection failed");
                tokio::select! {
                    _ = tokio::time::sleep(error_delay) => {}
                    _ = stopped.changed() => {}
                }
                error_delay = (error_delay * 2).min(MAX_ERROR_DELAY);
                continue;
            }
        };
        error_delay = FIRST_ERROR_DELAY;
        if !announced {
            announced = true;
            ready.send_modify(|count| *count += 1);
        }
        // Rows committed while we were not listening get no notification.
        for kind in OutboxKind::ALL {
            waker.wake_local(kind);
        }
        loop {
            let wakeup = tokio::select! {
                wakeup = listener.recv() => wakeup,
                _ = stopped.changed() => return,
            };
            match wakeup {
                Ok(Wakeup::Notified(kind)) => waker.wake_local(kind),
                Ok(Wakeup::Reconnected) => {
                    for kind in OutboxKind::ALL {
                        waker.wake_local(kind);
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "outbox LISTEN connection lost; reconnecting");
                    break;
                }
            }
        }
    }
}
