//! Spawning the background drain at startup, and stopping it with the
//! server.
//!
//! The drain loop itself is `outbox_core::worker`; this module wires it to
//! the database: the store for the connection's backend, PostgreSQL `LISTEN`
//! for wake-ups from other processes (on a connection of its own, see
//! [`OutboxWorkerBuilder::listen_url`]), `NOTIFY` to wake them, and the
//! backfill of replicated models as a task of the worker.
//!
//! ```no_run
//! outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 } }
//! use axum::Router;
//! use outbox_axum::OutboxWorker;
//! use outbox_core::Receivers;
//!
//! # async fn run(db: sea_orm::DatabaseConnection) -> Result<(), Box<dyn std::error::Error>> {
//! let receivers = Receivers::new().discard(OutboxCategory::OrgUpdate);
//! let worker = OutboxWorker::builder(db, receivers).spawn().await?;
//! let app: Router = Router::new().layer(worker.layer());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! // Ctrl-C or SIGTERM stops the worker; the server stops with it.
//! worker.stop_on(outbox_axum::shutdown_signal());
//! axum::serve(listener, app)
//!     .with_graceful_shutdown(worker.stopping().cancelled_owned())
//!     .await?;
//! worker.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! `worker.stopping()` is a `tokio_util` `CancellationToken`: cancel it (or
//! let [`WorkerHandle::stop_on`] cancel it when a signal comes) and both the
//! server and the worker begin to stop; `worker.shutdown()` then waits for
//! the deliveries in flight within its bound. [`WorkerHandle::settled`]
//! waits until the worker has nothing left to do now (tests of the
//! background drain wait on it).

mod signal;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sea_orm::{DatabaseConnection, DbBackend};
use tokio_util::sync::CancellationToken;

use outbox_core::worker::{Waker, WorkerBuilder};
use outbox_core::{
    Category, Clock, DeadLetterPolicy, DrainConfig, Drainer, IncompleteReceivers, OutboxKind,
    Receivers, SystemClock,
};
use outbox_seaorm::backfill::Backfill;
use outbox_seaorm::inbox;
use outbox_seaorm::listener::{PgNotifier, PgWakeSource};
use outbox_seaorm::{check_schema, SchemaError, SeaOrmStore, UnsupportedBackend};

pub use outbox_core::worker::{
    NotSettled, SettleError, DEFAULT_POLL_INTERVAL, DEFAULT_ROUNDS_IN_FLIGHT,
    DEFAULT_SHUTDOWN_TIMEOUT,
};
pub use signal::shutdown_signal;

/// Default time between two backfill ticks: 60 s (the backfill budget is per
/// minute).
pub const DEFAULT_BACKFILL_INTERVAL: Duration = Duration::from_secs(60);

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
    /// The outbox migrations have not all run (or the database could not be
    /// read to tell): the error names the missing table and the fix.
    #[error(transparent)]
    Schema(#[from] SchemaError),
}

/// How the worker listens for wake-ups from other processes.
#[derive(Clone, Debug)]
enum Listen {
    Off,
    /// A dedicated connection with the pool's own options.
    Pool,
    /// A dedicated connection to this URL.
    Url(String),
}

/// Builds and spawns the background drain over a database.
pub struct OutboxWorkerBuilder<C: Category> {
    db: DatabaseConnection,
    receivers: Receivers<C>,
    config: DrainConfig,
    poll_interval: Duration,
    shutdown_timeout: Duration,
    kinds: Vec<OutboxKind>,
    rounds_in_flight: usize,
    gather: Duration,
    gauge_interval: Option<Duration>,
    listen: Listen,
    clock: Option<Arc<dyn Clock>>,
    backfill: Option<Arc<Backfill>>,
    backfill_interval: Duration,
    dead_letters: DeadLetterPolicy,
    inbox_retention: Option<Duration>,
    truncate_drained: bool,
}

/// The background drain.
#[derive(Debug)]
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
            rounds_in_flight: DEFAULT_ROUNDS_IN_FLIGHT,
            gather: outbox_core::worker::DEFAULT_GATHER,
            gauge_interval: Some(outbox_core::worker::DEFAULT_GAUGE_INTERVAL),
            listen: Listen::Pool,
            clock: None,
            backfill: None,
            backfill_interval: DEFAULT_BACKFILL_INTERVAL,
            dead_letters: DeadLetterPolicy::new(),
            inbox_retention: None,
            truncate_drained: true,
        }
    }
}

impl<C: Category> OutboxWorkerBuilder<C> {
    /// The drain's tuning (batch size, concurrency, lease, delivery timeout,
    /// backoff). Default: [`DrainConfig::default`].
    pub fn drain_config(mut self, config: DrainConfig) -> Self {
        self.config = config;
        self
    }

    /// How long an idle drain waits before looking again when nothing wakes
    /// it. Default: 1 s.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
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

    /// Rounds of one kind in flight at once. Default: 4.
    pub fn rounds_in_flight(mut self, rounds: usize) -> Self {
        self.rounds_in_flight = rounds;
        self
    }

    /// The gather window under load: after a claim that took several
    /// shards, the next claim woken by new rows starts no sooner than this
    /// after it, so that rows committed meanwhile cost one claim (see
    /// [`outbox_core::worker::WorkerBuilder::gather`]). `Duration::ZERO`
    /// claims at every wake-up. Default: 4 ms.
    pub fn gather(mut self, window: Duration) -> Self {
        self.gather = window;
        self
    }

    /// How often the worker updates the backlog gauges of
    /// [`outbox_core::metrics`] (depth, oldest age, failing and quarantined
    /// shards; four reads per kind); `None` turns them off. Default: every
    /// 15 s.
    pub fn gauge_interval(mut self, interval: Option<Duration>) -> Self {
        self.gauge_interval = interval;
        self
    }

    /// Whether to `LISTEN` for wake-ups from other processes on PostgreSQL,
    /// on a dedicated connection opened with the pool's options. Default: on.
    pub fn listen(mut self, listen: bool) -> Self {
        self.listen = if listen { Listen::Pool } else { Listen::Off };
        self
    }

    /// `LISTEN` on a dedicated connection to `url` instead of the pool's:
    /// what a pool behind a transaction-pooling proxy (PgBouncer in
    /// `pool_mode = transaction`) needs, since `LISTEN` is session state.
    /// Point it at PostgreSQL directly, or at a pooler in session mode.
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.listen = Listen::Url(url.into());
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

    /// Prunes the inbox of this worker's database
    /// ([`outbox_seaorm::inbox`]): rows older than `retention` are deleted
    /// at start and then every tenth of `retention` (at most hourly, at
    /// least every second), on the drain's clock. Default: no pruning (the
    /// table grows by one row per message applied). Use
    /// [`outbox_seaorm::inbox::DEFAULT_RETENTION`] (7 days) unless shards
    /// may stay undelivered longer: a message redelivered after its inbox
    /// row was pruned is applied again.
    pub fn inbox_retention(mut self, retention: Duration) -> Self {
        self.inbox_retention = Some(retention);
        self
    }

    /// Whether, on PostgreSQL, this worker empties the outbox tables'
    /// drained partitions with `TRUNCATE` every
    /// [`ring::INTERVAL`](outbox_seaorm::ring::INTERVAL) (see
    /// [`outbox_seaorm::ring`]): what keeps the tables small while
    /// something holds vacuum's horizon back, when the database is migrated
    /// to the partition ring (`outbox_migrations::OutboxRingMigrator`).
    /// Looked at once, when the worker starts: on plain tables nothing runs,
    /// and a database opted in while workers run is looked after by the
    /// workers started afterwards. Default: `true`. Several
    /// workers on one database may all do it (each truncation locks its
    /// partition and looks again first); turn it off where another process
    /// does it, or to run [`ring::truncate_drained`](outbox_seaorm::ring::truncate_drained)
    /// on a schedule of one's own.
    pub fn truncate_drained(mut self, truncate: bool) -> Self {
        self.truncate_drained = truncate;
        self
    }

    /// The clock of the drain (tests). Default: the system clock.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Checks that it can work, then starts the drain loops (and, on
    /// PostgreSQL, the `LISTEN` connection) on the current tokio runtime.
    ///
    /// Before anything starts, it checks that every live category has a
    /// receiver and that every outbox migration has run
    /// ([`outbox_seaorm::check_schema`], one catalogue query), so that a
    /// forgotten migration stops the application at startup, with the fix in
    /// the error, instead of a worker that logs `no such table` forever.
    ///
    /// # Errors
    ///
    /// [`WorkerError::IncompleteReceivers`] when a live category has no
    /// receiver, naming it; [`WorkerError::Schema`] when an outbox migration
    /// has not run (naming it, a table or column it creates, and how to run
    /// the migrations) or the database cannot be read;
    /// [`WorkerError::UnsupportedBackend`] for a database other than
    /// PostgreSQL or SQLite.
    pub async fn spawn(self) -> Result<WorkerHandle<C>, WorkerError> {
        self.receivers.ensure_complete()?;
        let store = SeaOrmStore::new(self.db.clone())?;
        check_schema(&self.db).await?;
        let clock: Arc<dyn Clock> = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let drainer = Drainer::builder(store, self.receivers)
            .config(self.config)
            .dead_letters(self.dead_letters)
            .shared_clock(clock.clone())
            .build();
        let waker = Waker::new().with_notifier(PgNotifier::new(self.db.clone()));
        let mut worker = WorkerBuilder::new(drainer)
            .kinds(self.kinds)
            .poll_interval(self.poll_interval)
            .shutdown_timeout(self.shutdown_timeout)
            .rounds_in_flight(self.rounds_in_flight)
            .gather(self.gather)
            .gauge_interval(self.gauge_interval)
            .waker(waker);
        let source = match self.listen {
            Listen::Off => None,
            Listen::Pool => PgWakeSource::from_pool(&self.db),
            Listen::Url(url) => (self.db.get_database_backend() == DbBackend::Postgres)
                .then(|| PgWakeSource::connect(url)),
        };
        if let Some(source) = source {
            worker = worker.wake_source(source);
        }
        let handle = worker.spawn();
        if let Some(backfill) = &self.backfill {
            let (db, backfill, waker) = (self.db.clone(), backfill.clone(), handle.waker().clone());
            let interval = self.backfill_interval;
            handle.spawn(move |stop| backfill_loop(db, backfill, interval, waker, stop));
        }
        if let Some(retention) = self.inbox_retention {
            let db = self.db.clone();
            handle.spawn(move |stop| prune_loop(db, retention, clock, stop));
        }
        if self.truncate_drained && ring_in_use(&self.db).await {
            let db = self.db.clone();
            handle.spawn(move |stop| ring_loop(db, stop));
        }
        Ok(WorkerHandle {
            db: self.db,
            backfill: self.backfill,
            inner: handle,
        })
    }
}

/// A running background drain.
pub struct WorkerHandle<C: Category> {
    db: DatabaseConnection,
    backfill: Option<Arc<Backfill>>,
    inner: outbox_core::worker::WorkerHandle<C>,
}

impl<C: Category> std::fmt::Debug for WorkerHandle<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerHandle")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<C: Category> WorkerHandle<C> {
    /// The database the worker drains.
    pub fn connection(&self) -> &DatabaseConnection {
        &self.db
    }

    /// The drainer (for flushes outside HTTP, inspection, tests).
    pub fn drainer(&self) -> &Drainer<C> {
        self.inner.drainer()
    }

    /// The waker of this worker's loops (and, on PostgreSQL, of other
    /// processes' through `NOTIFY`).
    pub fn waker(&self) -> &Waker {
        self.inner.waker()
    }

    /// The backfill this worker runs, if any (for its status).
    pub fn backfill(&self) -> Option<&Arc<Backfill>> {
        self.backfill.as_ref()
    }

    /// Cancelled when the worker begins to stop; cancel it to stop it. Pass
    /// `stopping().cancelled_owned()` to axum's `with_graceful_shutdown`, so
    /// that the server stops with the worker.
    pub fn stopping(&self) -> CancellationToken {
        self.inner.stopping()
    }

    /// Stops the worker once `signal` completes (unless it stops first):
    /// [`stopping`](Self::stopping) is cancelled, so a server serving with
    /// `with_graceful_shutdown(worker.stopping().cancelled_owned())` stops
    /// too. `worker.stop_on(outbox_axum::shutdown_signal())` ties both to
    /// Ctrl-C and SIGTERM; any future will do (a test's channel, a
    /// supervisor's token).
    pub fn stop_on(&self, signal: impl Future<Output = ()> + Send + 'static) {
        let stopping = self.stopping();
        tokio::spawn(async move {
            tokio::select! {
                () = signal => stopping.cancel(),
                () = stopping.cancelled() => {}
            }
        });
    }

    /// Waits until this worker has nothing left to do now: no round in
    /// flight, no synchronous flush's completion pending, and no row of
    /// its kinds due in a free shard that is not backing off; rows due
    /// meanwhile are claimed at once. It does not wait for rows scheduled
    /// later (a backoff, a pause) or shards another process holds. Tests of
    /// the background drain wait on it instead of polling the tables
    /// (bounded: `outbox_testing::settled`). See
    /// [`outbox_core::worker::WorkerHandle::settled`].
    ///
    /// # Errors
    ///
    /// [`SettleError`]: the database could not say what is due, or the
    /// worker stopped first.
    pub async fn settled(&self) -> Result<(), SettleError> {
        self.inner.settled().await
    }

    /// Waits until every drain loop has gone idle once and, on PostgreSQL,
    /// the `LISTEN` connection is up (or found unavailable: the worker then
    /// polls). From then on, a commit's wake-up is not missed. Readiness
    /// probes and tests use it.
    pub async fn ready(&self) {
        self.inner.ready().await;
    }

    /// Stops claiming, lets the rounds in flight finish within the shutdown
    /// timeout, cancels those still running then and ends their claims
    /// (another process may take those shards at once; their rows are
    /// delivered again, at least once). Call it after
    /// `axum::serve(..).with_graceful_shutdown(..)` returns, so that the
    /// requests in flight flush first.
    pub async fn shutdown(self) {
        self.inner.shutdown().await;
    }
}

/// Prunes the inbox every tenth of `retention` (between 1 s and 1 h).
async fn prune_loop(
    db: DatabaseConnection,
    retention: Duration,
    clock: Arc<dyn Clock>,
    stop: CancellationToken,
) {
    let interval = (retention / 10).clamp(Duration::from_secs(1), Duration::from_secs(3600));
    loop {
        match inbox::prune_older_than(&db, retention, clock.as_ref()).await {
            Ok(0) => {}
            Ok(pruned) => tracing::debug!(pruned, "outbox inbox pruned"),
            Err(error) => {
                tracing::warn!(%error, "outbox inbox pruning failed; retrying at the next interval")
            }
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// Whether the outbox tables are the partition ring; when the catalogue
/// cannot be read, assumed so (the loop then finds out each second).
async fn ring_in_use(db: &DatabaseConnection) -> bool {
    outbox_seaorm::ring::is_partitioned(db)
        .await
        .unwrap_or_else(|error| {
            tracing::warn!(%error, "could not tell whether the outbox tables are partitioned");
            true
        })
}

/// Empties drained partitions of both outbox tables every
/// [`ring::INTERVAL`](outbox_seaorm::ring::INTERVAL).
async fn ring_loop(db: DatabaseConnection, stop: CancellationToken) {
    loop {
        for kind in OutboxKind::ALL {
            if let Err(error) = outbox_seaorm::ring::truncate_drained(&db, kind).await {
                tracing::warn!(%error, kind = kind.as_str(), "could not empty the outbox's drained partitions; retrying at the next interval");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(outbox_seaorm::ring::INTERVAL) => {}
            () = stop.cancelled() => return,
        }
    }
}

async fn backfill_loop(
    db: DatabaseConnection,
    backfill: Arc<Backfill>,
    interval: Duration,
    waker: Waker,
    stop: CancellationToken,
) {
    loop {
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
            () = tokio::time::sleep(interval) => {}
            () = stop.cancelled() => return,
        }
    }
}
