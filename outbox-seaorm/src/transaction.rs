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

use sea_orm::{DbErr, SqliteTransactionMode, TransactionOptions, TransactionTrait};

/// The options of a transaction that will write: `BEGIN IMMEDIATE` on
/// SQLite, a plain `BEGIN` elsewhere. For
/// `TransactionTrait::begin_with_options`, or a layer's own
/// configuration; [`begin_write`] begins one.
pub const fn write_transaction_options() -> TransactionOptions {
    TransactionOptions {
        isolation_level: None,
        access_mode: None,
        sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
    }
}

/// The options of a transaction that will write, not a transaction: see
/// [`write_transaction_options`].
#[deprecated(
    since = "0.1.1",
    note = "use `outbox_seaorm::write_transaction_options`"
)]
#[doc(hidden)]
pub const fn write_transaction() -> TransactionOptions {
    write_transaction_options()
}

/// Begins a transaction that will write (see the [module
/// documentation](self)).
///
/// # Errors
///
/// The database's, when it cannot begin one (on SQLite, when another
/// connection holds the write lock for longer than `busy_timeout`).
pub async fn begin_write<T: TransactionTrait>(db: &T) -> Result<T::Transaction, DbErr> {
    db.begin_with_options(write_transaction_options()).await
}
