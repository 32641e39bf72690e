//! Transactions that will write, begun so that SQLite cannot refuse them
//! half-way.
//!
//! SQLite begins a transaction `DEFERRED` by default: it takes a read
//! snapshot at its first `SELECT` and asks for the write lock only at its
//! first write. If another connection commits in between (the background
//! drain deleting delivered rows, say), the upgrade fails at once with
//! `SQLITE_BUSY` — `busy_timeout` does not help, since waiting cannot make
//! the old snapshot current. A request that reads, then writes its model and
//! its outbox row, would fail at random under load. Beginning `IMMEDIATE`
//! takes the write lock first (waiting up to `busy_timeout` for it), so the
//! transaction cannot fail that way. PostgreSQL ignores the option.
//!
//! ```
//! # outbox_core::registry! {
//! #     OrganizationScope = 0 (shard_field = "organization_id") { OrganizationUpdate = 1 }
//! # }
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # use sea_orm_migration::MigratorTrait;
//! # let db = sea_orm::Database::connect("sqlite::memory:").await?;
//! # outbox_migrations::OutboxMigrator::up(&db, None).await?;
//! use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId};
//!
//! let txn = outbox_seaorm::begin_write(&db).await?; // BEGIN IMMEDIATE on SQLite
//! // ... read, then write models and outbox rows on `&txn` ...
//! let message = OutboxMessage::new(OutboxCategory::OrganizationUpdate, ShardId(7), ObjectId(7));
//! write_region(&txn, message).await?;
//! txn.commit().await?;
//! # Ok(()) }
//! ```

use async_trait::async_trait;
use sea_orm::{
    ConnectionTrait, DbBackend, DbErr, SqliteTransactionMode, TransactionOptions, TransactionTrait,
};

use outbox_core::{ClaimBeforeCommit, ClaimRequest, ShardClaim, ShardKey, StoreError};

/// The options of a transaction that will write: `BEGIN IMMEDIATE` on
/// SQLite, a plain `BEGIN` elsewhere.
pub const fn write_transaction() -> TransactionOptions {
    TransactionOptions {
        isolation_level: None,
        access_mode: None,
        sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
    }
}

/// Begins a transaction that will write (see the [module
/// documentation](self)).
///
/// # Errors
///
/// The database's, when it cannot begin one (on SQLite, when another
/// connection holds the write lock for longer than `busy_timeout`).
pub async fn begin_write<T: TransactionTrait>(db: &T) -> Result<T::Transaction, DbErr> {
    db.begin_with_options(write_transaction()).await
}

/// Where the synchronous flush claims the shards a transaction wrote
/// ([`PreparedFlush::claim`](outbox_core::PreparedFlush::claim)): in that
/// transaction, just before its commit (`ClaimOn(&txn)`), or after the
/// commit on a connection (`ClaimOn(&db)`). One statement on PostgreSQL
/// that never waits for another worker or transaction.
///
/// ```
/// # outbox_core::registry! {
/// #     OrganizationScope = 0 (shard_field = "organization_id") { OrganizationUpdate = 1 }
/// # }
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # use sea_orm_migration::MigratorTrait;
/// # let db = sea_orm::Database::connect("sqlite::memory:").await?;
/// # outbox_migrations::OutboxMigrator::up(&db, None).await?;
/// use outbox_core::{Drainer, Receivers};
/// use outbox_seaorm::{write_region, ClaimOn, ObjectId, OutboxMessage, SeaOrmStore, ShardId};
///
/// let receivers = Receivers::new().discard(OutboxCategory::OrganizationUpdate);
/// let drainer = Drainer::new(SeaOrmStore::new(db.clone())?, receivers);
///
/// let txn = outbox_seaorm::begin_write(&db).await?;
/// let message = OutboxMessage::new(OutboxCategory::OrganizationUpdate, ShardId(7), ObjectId(7));
/// let row = write_region(&txn, message).await?;
/// let mut flush = drainer.prepare_flush([(row.shard, row.id)]);
/// flush.claim(&ClaimOn(&txn)).await?; // the last statement before COMMIT
/// txn.commit().await?;
/// let outcome = flush.deliver().await; // delivered; nothing sent to the database
/// assert_eq!(outcome.report.deliveries, 1);
/// # drainer.settled().await;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ClaimOn<'a, C>(pub &'a C);

#[async_trait]
impl<C: ConnectionTrait + Send + Sync> ClaimBeforeCommit for ClaimOn<'_, C> {
    async fn claim_before_commit(
        &self,
        request: &ClaimRequest,
        shards: &[(ShardKey, i64)],
    ) -> Result<Vec<ShardClaim>, StoreError> {
        match self.0.get_database_backend() {
            DbBackend::Postgres => {
                crate::store::postgres::claim_before_commit(self.0, request, shards).await
            }
            DbBackend::Sqlite => {
                crate::store::sqlite::claim_before_commit(self.0, request, shards).await
            }
            other => Err(StoreError::database(
                "claim shards before the commit",
                crate::UnsupportedBackend(other),
            )),
        }
    }
}
