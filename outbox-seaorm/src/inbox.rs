//! The inbox: receivers that write to a database apply each message once.
//!
//! Delivery is at least once: a process that crashes after a receiver's
//! transaction commits and before the outbox rows are deleted delivers the
//! message again. An [`Inbox`] records the message's id
//! ([`Message::message_id`](outbox_core::Message::message_id)) in the
//! `outbox_inbox` table *in the transaction that applies the change*: both
//! commit or neither does, and a redelivery finds the id and skips the
//! change. The change is applied exactly once, however often the message
//! is delivered, with no idempotence written by hand.
//!
//! The table lives in the database the change is written to, which need
//! not be the one of the outbox: a receiver that calls another service
//! forwards the id (for example in a header; see
//! [`current_message_id`](outbox_core::message::current_message_id)), and
//! that service records it in its own inbox, in its own transaction. A
//! JetStream consumer records the `Nats-Msg-Id` the same way.
//!
//! ```
//! # outbox_core::registry! { CatalogScope = 0 { ProductUpdate = 1 } }
//! use outbox_core::{HandlerError, Message, Receivers};
//! use outbox_seaorm::inbox::{Applied, Inbox};
//! use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr};
//!
//! fn receivers(db: DatabaseConnection) -> Receivers<OutboxCategory> {
//!     let inbox = Inbox::new("stock-counter");
//!     Receivers::new().on(OutboxCategory::ProductUpdate, move |message: Message<OutboxCategory>| {
//!         let (db, inbox) = (db.clone(), inbox.clone());
//!         async move {
//!             let applied = inbox
//!                 .apply(&db, message.message_id, |txn| {
//!                     Box::pin(async move {
//!                         // Not idempotent: applied twice, it would count twice.
//!                         txn.execute_unprepared("UPDATE stock SET updates = updates + 1").await?;
//!                         Ok::<_, DbErr>(())
//!                     })
//!                 })
//!                 .await?;
//!             if let Applied::Already = applied {
//!                 tracing::debug!(id = %message.message_id, "applied before: skipped");
//!             }
//!             Ok::<_, HandlerError>(())
//!         }
//!     })
//! }
//! # let _ = receivers;
//! ```
//!
//! # Pruning
//!
//! Inbox rows are kept for a retention and then deleted ([`prune`], or
//! `OutboxWorkerBuilder::inbox_retention` in `outbox-axum`, which prunes
//! periodically). A message can be redelivered only while its outbox rows
//! exist, which after a crash is the 3 s lease plus its shard's backoff,
//! so the retention must exceed the longest a shard may stay undelivered:
//! the default of 7 days leaves an operator time to release a quarantined
//! shard. A JetStream consumer's retention must exceed the stream's
//! redelivery horizon in the same way.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_core::uuid::Uuid;
use outbox_core::{Clock, SystemClock};
use sea_orm::{
    ConnectionTrait, DbBackend, DbErr, Statement, TransactionSession, TransactionTrait, Value,
};

use crate::time;

/// The default retention of inbox rows: 7 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Rows deleted per statement when pruning.
const PRUNE_BATCH: u64 = 5000;

/// The inbox of one consumer: the message ids it has applied.
///
/// Cheap to clone. The consumer name keeps the ids of different receivers
/// of one database apart (a message applied by one is still new to
/// another); keep it stable across deploys.
#[derive(Clone)]
pub struct Inbox {
    consumer: Arc<str>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox")
            .field("consumer", &self.consumer)
            .finish_non_exhaustive()
    }
}

/// Whether a message was new to the inbox ([`Inbox::receive`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// First seen: apply it, in the same transaction.
    First,
    /// Applied before (committed by an earlier delivery): skip it.
    Duplicate,
}

/// What [`Inbox::apply`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied<T> {
    /// The change was applied now and committed with the message id; the
    /// closure's value.
    Now(T),
    /// The message was applied by an earlier delivery: the closure did not
    /// run and nothing was written.
    Already,
}

/// What [`Inbox::apply`] could not do. Nothing was committed: the message
/// id is recorded only with the change.
#[derive(Debug, thiserror::Error)]
pub enum InboxError<E> {
    /// The transaction could not begin or commit, or the id not be recorded.
    #[error("outbox inbox: {0}")]
    Database(#[source] DbErr),
    /// The change failed; its transaction was rolled back.
    #[error("outbox inbox: the change failed: {0}")]
    Apply(#[source] E),
}

impl Inbox {
    /// The inbox of `consumer` (e.g. `"region-replica"`).
    pub fn new(consumer: impl Into<Arc<str>>) -> Self {
        Self {
            consumer: consumer.into(),
            clock: Arc::new(SystemClock),
        }
    }

    /// The clock that dates received ids (tests). Default: the system clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The consumer name.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Records `message_id` on `db`, which must be the transaction that
    /// applies the message: [`Received::First`] when it is new (apply the
    /// change, then commit), [`Received::Duplicate`] when an earlier
    /// transaction recorded it (skip the change).
    ///
    /// On PostgreSQL, a concurrent transaction recording the same id makes
    /// this wait for its outcome: `Duplicate` if it commits, `First` if it
    /// rolls back. Called on a connection outside a transaction, the id is
    /// recorded at once, whatever happens to the change: use a transaction.
    ///
    /// # Errors
    ///
    /// [`DbErr`] when the insert fails (the inbox migration has not run, the
    /// database is gone), or for a database other than PostgreSQL or SQLite.
    pub async fn receive<C: ConnectionTrait>(
        &self,
        db: &C,
        message_id: Uuid,
    ) -> Result<Received, DbErr> {
        let backend = supported(db)?;
        let result = db
            .execute_raw(Statement::from_sql_and_values(
                backend,
                "INSERT INTO outbox_inbox (consumer, message_id, received_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (consumer, message_id) DO NOTHING",
                [
                    Value::from(self.consumer.to_string()),
                    Value::from(message_id),
                    time::bind(backend, self.clock.now()),
                ],
            ))
            .await?;
        if result.rows_affected() == 1 {
            return Ok(Received::First);
        }
        metrics::counter!(outbox_core::metrics::INBOX_DUPLICATES, "consumer" => self.consumer.to_string())
            .increment(1);
        Ok(Received::Duplicate)
    }

    /// Applies a message once: begins a transaction on `db`, records
    /// `message_id` in it and, if it is new, runs `apply` in it and commits
    /// both. A message applied before is [`Applied::Already`]: `apply` does
    /// not run. The closure has the shape of SeaORM's
    /// [`TransactionTrait::transaction`].
    ///
    /// # Errors
    ///
    /// [`InboxError::Apply`] when `apply` fails, [`InboxError::Database`]
    /// when the transaction cannot begin, record or commit; either way the
    /// transaction is rolled back and the message stays new (so the drain
    /// retries it).
    pub async fn apply<D, F, T, E>(
        &self,
        db: &D,
        message_id: Uuid,
        apply: F,
    ) -> Result<Applied<T>, InboxError<E>>
    where
        D: TransactionTrait,
        F: for<'c> FnOnce(
                &'c D::Transaction,
            ) -> Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'c>>
            + Send,
        T: Send,
        E: std::error::Error + Send,
    {
        let txn = db.begin().await.map_err(InboxError::Database)?;
        match self
            .receive(&txn, message_id)
            .await
            .map_err(InboxError::Database)?
        {
            Received::Duplicate => {
                txn.rollback().await.map_err(InboxError::Database)?;
                Ok(Applied::Already)
            }
            Received::First => {
                // Dropped on error: rolled back, the id with it.
                let value = apply(&txn).await.map_err(InboxError::Apply)?;
                txn.commit().await.map_err(InboxError::Database)?;
                Ok(Applied::Now(value))
            }
        }
    }

    /// Whether `message_id` is recorded for this consumer.
    ///
    /// # Errors
    ///
    /// [`DbErr`] when the query fails.
    pub async fn contains<C: ConnectionTrait>(
        &self,
        db: &C,
        message_id: Uuid,
    ) -> Result<bool, DbErr> {
        let backend = supported(db)?;
        let row = db
            .query_one_raw(Statement::from_sql_and_values(
                backend,
                "SELECT 1 AS found FROM outbox_inbox WHERE consumer = $1 AND message_id = $2",
                [
                    Value::from(self.consumer.to_string()),
                    Value::from(message_id),
                ],
            ))
            .await?;
        Ok(row.is_some())
    }
}

/// Deletes the inbox rows of every consumer received before `before`, a
/// batch at a time (short statements, so receivers are not held up);
/// returns how many.
///
/// # Errors
///
/// [`DbErr`] when a statement fails; the batches before it stay deleted.
pub async fn prune<C: ConnectionTrait>(db: &C, before: DateTime<Utc>) -> Result<u64, DbErr> {
    let backend = supported(db)?;
    let sql = format!(
        "DELETE FROM outbox_inbox WHERE (consumer, message_id) IN \
         (SELECT consumer, message_id FROM outbox_inbox WHERE received_at < $1 LIMIT {PRUNE_BATCH})"
    );
    let mut pruned = 0;
    loop {
        let deleted = db
            .execute_raw(Statement::from_sql_and_values(
                backend,
                sql.clone(),
                [time::bind(backend, before)],
            ))
            .await?
            .rows_affected();
        pruned += deleted;
        if deleted < PRUNE_BATCH {
            metrics::counter!(outbox_core::metrics::INBOX_PRUNED).increment(pruned);
            return Ok(pruned);
        }
    }
}

/// Deletes the inbox rows older than `retention` on `clock` ([`prune`]).
///
/// # Errors
///
/// [`DbErr`] when a statement fails.
pub async fn prune_older_than<C: ConnectionTrait>(
    db: &C,
    retention: Duration,
    clock: &dyn Clock,
) -> Result<u64, DbErr> {
    let retention = chrono::Duration::from_std(retention).unwrap_or(chrono::Duration::MAX);
    let before = clock
        .now()
        .checked_sub_signed(retention)
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    prune(db, before).await
}

fn supported<C: ConnectionTrait>(db: &C) -> Result<DbBackend, DbErr> {
    match db.get_database_backend() {
        backend @ (DbBackend::Postgres | DbBackend::Sqlite) => Ok(backend),
        other => Err(DbErr::Custom(format!(
            "the outbox inbox supports PostgreSQL and SQLite, not {other:?}"
        ))),
    }
}
