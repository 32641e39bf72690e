//! # outbox-seaorm
//!
//! The SeaORM side of the outbox: the write API that puts outbox rows in your
//! transaction, and [`SeaOrmStore`], the PostgreSQL and SQLite storage that
//! `outbox_core::Drainer` delivers from.
//!
//! ```no_run
//! outbox_core::registry! {
//!     OrganizationScope = 0 (shard_field = "organization_id") {
//!         OrganizationUpdate = 1,
//!     }
//! }
//! use outbox_core::{Drainer, Message, Receivers};
//! use outbox_seaorm::{write_region, OutboxMessage, SeaOrmStore};
//! use sea_orm::TransactionTrait;
//! use sea_orm_migration::MigratorTrait;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let db = sea_orm::Database::connect("sqlite://outbox.sqlite?mode=rwc").await?;
//! outbox_migrations::OutboxMigrator::up(&db, None).await?;
//!
//! // Write: the outbox row commits or rolls back with your change.
//! let txn = db.begin().await?;
//! let row = write_region(&txn, OutboxMessage::new(OutboxCategory::OrganizationUpdate, 7, 7)).await?;
//! txn.commit().await?;
//!
//! // Deliver: flush the shard now, or let a background drain pick it up.
//! let receivers = Receivers::new().on(OutboxCategory::OrganizationUpdate, |msg: Message<OutboxCategory>| async move {
//!     println!("organization {} changed", msg.object_identifier);
//!     Ok::<_, outbox_core::HandlerError>(())
//! });
//! let drainer = Drainer::new(SeaOrmStore::new(db.clone())?, receivers);
//! drainer.drain_shard(&row.shard, Some(row.id)).await?;
//! # Ok(()) }
//! ```
//!
//! # SQLite notes
//!
//! Timestamps are stored as fixed-width UTC text and compared as text; write
//! outbox rows only through this crate's functions. Use WAL mode
//! (`journal_mode=WAL`) when several connections write.

pub mod entity;
pub mod listener;
pub mod store;
#[cfg(feature = "test-utils")]
pub mod testing;
mod time;
pub mod write;

pub use store::{SeaOrmStore, UnsupportedBackend};
pub use write::{
    write_control, write_control_many, write_region, write_region_many, OutboxMessage, WriteError,
    WrittenRow,
};
