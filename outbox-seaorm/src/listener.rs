//! PostgreSQL `LISTEN/NOTIFY` wake-ups for the background drain.
//!
//! After a commit that leaves rows to the background drain (deferred rows, a
//! failed synchronous flush), [`notify`] sends `NOTIFY outbox_region` (or
//! `outbox_control`); an [`OutboxListener`] in every worker process receives
//! it and wakes the drain at once instead of at its next poll. Notifications
//! are a latency optimisation only: the drain still polls, so one that is lost
//! (a dropped connection, PgBouncer in transaction pooling mode) only delays
//! delivery.

use sea_orm::sqlx::postgres::PgListener;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement, Value};

use outbox_core::OutboxKind;

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

/// What an [`OutboxListener`] received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wakeup {
    /// Rows of this kind were committed for the background drain.
    Notified(OutboxKind),
    /// The connection was lost and re-established: notifications sent in
    /// between are gone, so every kind should be checked.
    Reconnected,
}

/// A `LISTEN` connection on both outbox channels.
pub struct OutboxListener {
    inner: PgListener,
}

impl std::fmt::Debug for OutboxListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxListener").finish_non_exhaustive()
    }
}

impl OutboxListener {
    /// Connects from `db`'s pool and listens on both channels. `None` when
    /// `db` is not PostgreSQL.
    ///
    /// # Errors
    ///
    /// The driver's error when the connection or `LISTEN` fails.
    pub async fn connect(db: &DatabaseConnection) -> Result<Option<Self>, DbErr> {
        if db.get_database_backend() != DbBackend::Postgres {
            return Ok(None);
        }
        let pool = db.get_postgres_connection_pool();
        let mut inner = PgListener::connect_with(pool)
            .await
            .map_err(|e| DbErr::Conn(sea_orm::RuntimeErr::SqlxError(e.into())))?;
        inner
            .listen_all([channel(OutboxKind::Region), channel(OutboxKind::Control)])
            .await
            .map_err(|e| DbErr::Conn(sea_orm::RuntimeErr::SqlxError(e.into())))?;
        Ok(Some(Self { inner }))
    }

    /// Waits for the next wake-up. A lost connection is re-established
    /// transparently and reported as [`Wakeup::Reconnected`].
    ///
    /// # Errors
    ///
    /// The driver's error when reconnecting fails; call again later.
    pub async fn recv(&mut self) -> Result<Wakeup, DbErr> {
        match self.inner.try_recv().await {
            Ok(Some(notification)) => Ok(match notification.channel() {
                "outbox_control" => Wakeup::Notified(OutboxKind::Control),
                _ => Wakeup::Notified(OutboxKind::Region),
            }),
            Ok(None) => Ok(Wakeup::Reconnected),
            Err(e) => Err(DbErr::Conn(sea_orm::RuntimeErr::SqlxError(e.into()))),
        }
    }
}
