//! PostgreSQL `LISTEN/NOTIFY` wake-ups for the background drain.
//!
//! After a commit that leaves rows to the background drain (deferred rows, a
//! failed synchronous flush), [`PgNotifier`] sends `NOTIFY outbox_region` (or
//! `outbox_control`) through the pool; a [`PgWakeSource`] in every worker
//! process receives it on its own connection and wakes the drain at once
//! instead of at its next poll.
//!
//! # Connections and poolers
//!
//! `NOTIFY` is transactional and needs no session: it goes through the
//! application's pool, even behind PgBouncer in transaction pooling mode.
//! `LISTEN` is session state: [`PgWakeSource`] opens one dedicated connection
//! of its own, from its own URL ([`PgWakeSource::connect`]), which must reach
//! PostgreSQL directly (or through a pooler in session mode) when the pool
//! goes through a transaction-pooling proxy. Notifications are a latency
//! optimisation only: when the source cannot listen, the worker says so once
//! in its log and polls until it can.

use async_trait::async_trait;
use sea_orm::sqlx::postgres::{PgConnectOptions, PgListener};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement, Value};

use outbox_core::worker::{Notifier, WakeSource, Wakeup};
use outbox_core::{BoxError, OutboxKind};

/// The notification channel of an outbox kind.
pub const fn channel(kind: OutboxKind) -> &'static str {
    match kind {
        OutboxKind::Region => "outbox_region",
        OutboxKind::Control => "outbox_control",
    }
}

/// Sends the wake-up notification of `kind` (PostgreSQL; a no-op elsewhere).
/// Inside a transaction it is delivered at commit, and not at all on rollback.
///
/// # Errors
///
/// The database's error when the statement fails.
pub async fn notify<Db: ConnectionTrait>(db: &Db, kind: OutboxKind) -> Result<(), DbErr> {
    if db.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    db.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT pg_notify($1, '')",
        [Value::from(channel(kind))],
    ))
    .await
    .map(|_| ())
}

/// Wakes drains in other processes with `NOTIFY`, through the pool.
#[derive(Clone, Debug)]
pub struct PgNotifier {
    db: DatabaseConnection,
}

impl PgNotifier {
    /// A notifier over `db` (a no-op unless it is PostgreSQL).
    pub fn new(db: DatabaseConnection) -> Self {
        Self { db }
    }
}

#[async_trait]
impl Notifier for PgNotifier {
    async fn notify(&self, kind: OutboxKind) -> Result<(), BoxError> {
        notify(&self.db, kind).await.map_err(Into::into)
    }
}

/// Where a [`PgWakeSource`] gets its connection.
#[derive(Clone, Debug)]
enum Target {
    Url(String),
    Options(Box<PgConnectOptions>),
}

/// Wake-ups from `NOTIFY`, on a dedicated `LISTEN` connection that
/// reconnects by itself. Connects at the first call of
/// [`next`](WakeSource::next), so a source can be built before the database
/// is reachable.
pub struct PgWakeSource {
    target: Target,
    listener: Option<PgListener>,
}

impl std::fmt::Debug for PgWakeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgWakeSource")
            .field("connected", &self.listener.is_some())
            .finish_non_exhaustive()
    }
}

impl PgWakeSource {
    /// A source listening on a connection of its own to `url`: point it at
    /// PostgreSQL directly (or at a pooler in session mode) when the
    /// application's pool goes through a transaction-pooling proxy.
    pub fn connect(url: impl Into<String>) -> Self {
        Self {
            target: Target::Url(url.into()),
            listener: None,
        }
    }

    /// A source listening on a connection of its own, opened with the
    /// options of `db`'s pool (the same server, the same URL). `None` when
    /// `db` is not PostgreSQL.
    pub fn from_pool(db: &DatabaseConnection) -> Option<Self> {
        if db.get_database_backend() != DbBackend::Postgres {
            return None;
        }
        let options = db
            .get_postgres_connection_pool()
            .connect_options()
            .as_ref()
            .clone();
        Some(Self {
            target: Target::Options(Box::new(options)),
            listener: None,
        })
    }

    async fn listen(&self) -> Result<PgListener, BoxError> {
        let mut listener = match &self.target {
            Target::Url(url) => PgListener::connect(url).await?,
            Target::Options(options) => {
                let pool = sea_orm::sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .connect_lazy_with(options.as_ref().clone());
                PgListener::connect_with(&pool).await?
            }
        };
        listener
            .listen_all([channel(OutboxKind::Region), channel(OutboxKind::Control)])
            .await?;
        Ok(listener)
    }
}

#[async_trait]
impl WakeSource for PgWakeSource {
    async fn next(&mut self) -> Result<Wakeup, BoxError> {
        let Some(listener) = self.listener.as_mut() else {
            self.listener = Some(self.listen().await?);
            return Ok(Wakeup::Resync);
        };
        match listener.try_recv().await {
            Ok(Some(notification)) => Ok(Wakeup::Rows(match notification.channel() {
                "outbox_control" => OutboxKind::Control,
                _ => OutboxKind::Region,
            })),
            // The connection was lost and re-established: notifications sent
            // in between are gone.
            Ok(None) => Ok(Wakeup::Resync),
            Err(error) => {
                self.listener = None;
                Err(error.into())
            }
        }
    }
}
