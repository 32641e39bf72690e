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
use outbox_core::fence::record_superseded;
use outbox_core::uuid::Uuid;
use outbox_core::{Category, Clock, FencingToken, Message, ShardKey, SystemClock};
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

/// What [`Inbox::apply`] or [`Inbox::apply_fenced`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied<T> {
    /// The change was applied now and committed with the message id; the
    /// closure's value.
    Now(T),
    /// The message was applied by an earlier delivery: the closure did not
    /// run and nothing was written.
    Already,
    /// Refused ([`Inbox::apply_fenced`] only): a delivery of the same shard
    /// with a higher fencing token was applied before, so this one comes
    /// from a worker that lost its claim, and a newer state is already
    /// there. The closure did not run and nothing was written; acknowledge
    /// the delivery (retrying would be refused again). Counted as
    /// `outbox.superseded`.
    Superseded {
        /// The highest token applied for the shard.
        highest: FencingToken,
    },
}

/// Where a delivery comes from, for a fenced inbox
/// ([`Inbox::apply_fenced`]): tokens are compared per consumer, sender and
/// shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FenceKey {
    /// The outbox the delivery comes from: its silo or service (a fencing
    /// token grows per outbox database, so two senders' tokens must not be
    /// compared). Keep it stable across deploys.
    pub sender: String,
    /// The shard, as [`ShardKey`]'s `Display` writes it (`region:0/42`).
    pub shard: String,
    /// The delivery's category, for the `outbox.superseded` counter.
    pub category: String,
    /// The claim's fencing token.
    pub token: FencingToken,
}

impl FenceKey {
    /// The key of a message delivered from `sender`'s outbox.
    pub fn of<C: Category>(sender: impl Into<String>, message: &Message<C>) -> Self {
        Self::new(
            sender,
            &message.shard,
            message.category.name(),
            message.fence,
        )
    }

    /// A key from parts (e.g. headers of a forwarded delivery).
    pub fn new(
        sender: impl Into<String>,
        shard: &ShardKey,
        category: impl Into<String>,
        token: FencingToken,
    ) -> Self {
        Self {
            sender: sender.into(),
            shard: shard.to_string(),
            category: category.into(),
            token,
        }
    }
}

/// What [`Inbox::fence`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fence {
    /// The token is the highest of its shard (or equal to it): recorded;
    /// apply the change in the same transaction.
    Current,
    /// A higher token of the shard was applied: skip the change.
    Superseded {
        /// The highest token applied for the shard.
        highest: FencingToken,
    },
}

/// What [`Inbox::apply`] could not do. Nothing was committed: the message
/// id is recorded only with the change.
#[derive(thiserror::Error)]
pub enum InboxError<E> {
    /// The transaction could not begin or commit, or the id not be recorded.
    #[error("outbox inbox: {0}")]
    Database(#[source] DbErr),
    /// The change failed; its transaction was rolled back.
    #[error("outbox inbox: the change failed: {0}")]
    Apply(#[source] E),
}

crate::error_debug::debug_with_message!(InboxError<E> { Database, Apply });

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
        self.apply_in_transaction(db, message_id, None, apply).await
    }

    /// Records `key`'s fencing token as the highest applied for its sender
    /// and shard on `db`, which must be the transaction that applies the
    /// change, unless a higher one was: [`Fence::Current`] (apply, then
    /// commit) or [`Fence::Superseded`] (skip the change, and commit to keep
    /// the refusal's count in the record, listed by [`fences`]; counted as
    /// `outbox.superseded` too).
    ///
    /// The record's row is locked until the transaction ends, so concurrent
    /// deliveries of one shard to this consumer apply one after the other,
    /// and the later one sees the earlier one's token: two workers' calls
    /// that overlap (one of them paused past its lease) cannot both win.
    ///
    /// # Errors
    ///
    /// [`DbErr`] when the statement fails (the fencing migration has not
    /// run, the database is gone), or for a database other than PostgreSQL
    /// or SQLite.
    pub async fn fence<C: ConnectionTrait>(&self, db: &C, key: &FenceKey) -> Result<Fence, DbErr> {
        let backend = supported(db)?;
        let consumer = Value::from(self.consumer.to_string());
        let (sender, shard) = (
            Value::from(key.sender.clone()),
            Value::from(key.shard.clone()),
        );
        let recorded = db
            .query_one_raw(Statement::from_sql_and_values(
                backend,
                "INSERT INTO outbox_inbox_fence (consumer, sender, shard, fence, applied_at) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (consumer, sender, shard) DO UPDATE \
                 SET fence = excluded.fence, applied_at = excluded.applied_at \
                 WHERE outbox_inbox_fence.fence <= excluded.fence \
                 RETURNING fence",
                [
                    consumer.clone(),
                    sender.clone(),
                    shard.clone(),
                    Value::from(key.token.get()),
                    time::bind(backend, self.clock.now()),
                ],
            ))
            .await?;
        if recorded.is_some() {
            return Ok(Fence::Current);
        }
        // Counted where an operator sees it (`fences`), with the refusal's
        // transaction: commit it to keep the count.
        let highest = db
            .query_one_raw(Statement::from_sql_and_values(
                backend,
                "UPDATE outbox_inbox_fence SET superseded = superseded + 1, superseded_at = $4 \
                 WHERE consumer = $1 AND sender = $2 AND shard = $3 RETURNING fence",
                [
                    consumer,
                    sender,
                    shard,
                    time::bind(backend, self.clock.now()),
                ],
            ))
            .await?
            .map(|row| row.try_get::<i64>("", "fence"))
            .transpose()?
            .map_or(key.token, FencingToken::new);
        record_superseded(
            &self.consumer,
            &key.category,
            &key.shard,
            key.token,
            highest,
        );
        Ok(Fence::Superseded { highest })
    }

    /// Applies a message once, and only if no newer claim of its shard was
    /// applied: [`apply`](Self::apply) with [`fence`](Self::fence) in the
    /// same transaction. A delivery from a worker that was paused past its
    /// lease (its token is lower than one applied since) is
    /// [`Applied::Superseded`]: `apply` does not run, and the newer state
    /// stays (rule 12).
    ///
    /// ```
    /// # outbox_core::registry! { CatalogScope = 0 { ProductUpdate = 1 } }
    /// use outbox_core::{HandlerError, Message, Receivers};
    /// use outbox_seaorm::inbox::{Applied, FenceKey, Inbox};
    /// use sea_orm::sea_query::{Expr, ExprTrait, Query};
    /// use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr};
    ///
    /// fn receivers(db: DatabaseConnection) -> Receivers<OutboxCategory> {
    ///     let inbox = Inbox::new("catalog-replica");
    ///     Receivers::new().on(OutboxCategory::ProductUpdate, move |message: Message<OutboxCategory>| {
    ///         let (db, inbox) = (db.clone(), inbox.clone());
    ///         async move {
    ///             let name = message.payload_as::<String>()?;
    ///             let key = FenceKey::of("catalog", &message);
    ///             let id = message.object_identifier;
    ///             let applied = inbox
    ///                 .apply_fenced(&db, message.message_id, &key, |txn| {
    ///                     Box::pin(async move {
    ///                         // Last writer wins: only a fenced inbox keeps a
    ///                         // paused worker from putting an old name back.
    ///                         // The payload is bound, never spliced into SQL.
    ///                         let rename = Query::update()
    ///                             .table("product")
    ///                             .value("name", name)
    ///                             .and_where(Expr::col("id").eq(id))
    ///                             .to_owned();
    ///                         txn.execute(&rename).await?;
    ///                         Ok::<_, DbErr>(())
    ///                     })
    ///                 })
    ///                 .await?;
    ///             if let Applied::Superseded { highest } = applied {
    ///                 tracing::info!(%highest, "a newer state is already applied");
    ///             }
    ///             Ok::<_, HandlerError>(())
    ///         }
    ///     })
    /// }
    /// # let _ = receivers;
    /// ```
    ///
    /// # Errors
    ///
    /// As [`apply`](Self::apply).
    pub async fn apply_fenced<D, F, T, E>(
        &self,
        db: &D,
        message_id: Uuid,
        key: &FenceKey,
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
        self.apply_in_transaction(db, message_id, Some(key), apply)
            .await
    }

    /// [`apply`](Self::apply), checking `fence` first when given
    /// ([`apply_fenced`](Self::apply_fenced)).
    async fn apply_in_transaction<D, F, T, E>(
        &self,
        db: &D,
        message_id: Uuid,
        fence: Option<&FenceKey>,
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
        if let Some(key) = fence {
            if let Fence::Superseded { highest } =
                self.fence(&txn, key).await.map_err(InboxError::Database)?
            {
                // Nothing applied: only the refusal's count is written.
                txn.commit().await.map_err(InboxError::Database)?;
                return Ok(Applied::Superseded { highest });
            }
        }
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
                // Dropped on error: rolled back, the id (and the token) with it.
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

/// What a fenced consumer recorded for one sender and shard: the highest
/// fencing token it applied, and how many deliveries it refused as
/// superseded (from workers paused past their lease, rule 12).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FenceRecord {
    /// The consumer ([`Inbox::new`]).
    pub consumer: String,
    /// The sender ([`FenceKey::sender`]).
    pub sender: String,
    /// The shard, as [`ShardKey`]'s `Display` writes it.
    pub shard: String,
    /// The highest token applied.
    pub fence: FencingToken,
    /// When it was applied.
    pub applied_at: DateTime<Utc>,
    /// Deliveries refused as superseded.
    pub superseded: u64,
    /// When the last of them was, if any.
    pub superseded_at: Option<DateTime<Utc>>,
}

/// The fence records of every consumer on `db`, those that refused the
/// most deliveries first (then the latest refusal, then the latest
/// applied), at most `limit`; and the total of refused deliveries over all
/// records. For operators: a sender whose shards show refusals has workers
/// that were paused (or partitioned) past their lease.
///
/// # Errors
///
/// [`DbErr`] when a query fails (the migrations have not run).
pub async fn fences<C: ConnectionTrait>(
    db: &C,
    limit: u64,
) -> Result<(Vec<FenceRecord>, u64), DbErr> {
    let backend = supported(db)?;
    let rows = db
        .query_all_raw(Statement::from_sql_and_values(
            backend,
            "SELECT consumer, sender, shard, fence, applied_at, superseded, superseded_at \
             FROM outbox_inbox_fence \
             ORDER BY superseded DESC, superseded_at DESC, applied_at DESC LIMIT $1",
            [Value::from(i64::try_from(limit).unwrap_or(i64::MAX))],
        ))
        .await?;
    let read = |error: outbox_core::StoreError| DbErr::Custom(error.to_string());
    let mut records = Vec::with_capacity(rows.len());
    for row in rows {
        records.push(FenceRecord {
            consumer: row.try_get("", "consumer")?,
            sender: row.try_get("", "sender")?,
            shard: row.try_get("", "shard")?,
            fence: FencingToken::new(row.try_get("", "fence")?),
            applied_at: time::get(&row, backend, "applied_at").map_err(read)?,
            superseded: u64::try_from(row.try_get::<i64>("", "superseded")?).unwrap_or_default(),
            superseded_at: time::get_opt(&row, backend, "superseded_at").map_err(read)?,
        });
    }
    let total = db
        .query_one_raw(Statement::from_string(
            backend,
            "SELECT CAST(COALESCE(SUM(superseded), 0) AS bigint) AS total FROM outbox_inbox_fence",
        ))
        .await?
        .map(|row| row.try_get::<i64>("", "total"))
        .transpose()?
        .unwrap_or_default();
    Ok((records, u64::try_from(total).unwrap_or_default()))
}

fn supported<C: ConnectionTrait>(db: &C) -> Result<DbBackend, DbErr> {
    match db.get_database_backend() {
        backend @ (DbBackend::Postgres | DbBackend::Sqlite) => Ok(backend),
        other => Err(DbErr::Custom(format!(
            "the outbox inbox supports PostgreSQL and SQLite, not {other:?}"
        ))),
    }
}
