//! # outbox-migrations
//!
//! [sea-orm-migration] migrations that create the outbox tables:
//!
//! - `region_outbox` and `control_outbox` (the latter with `region_name`), with
//!   the columns of Sentry's outboxes and indexes for the hot queries: due
//!   rows by `scheduled_for`, a shard's rows by `id` (the coalescing-group
//!   index of the first migration is dropped by [`FlushBeforeCommit`]: no
//!   statement used it);
//! - `outbox_dead_letter`, rows of scopes that opted into dead-lettering;
//! - `outbox_backfill_cursor` and `outbox_option`, the backfill cursors and
//!   runtime options (see `outbox_seaorm::backfill`);
//! - `outbox_claim_bucket`, the leases that give one worker a bucket of shards
//!   at a time. On PostgreSQL it is `UNLOGGED`: it writes no WAL, and a crash
//!   that empties it only ends leases, which fencing makes safe. Its 1,024
//!   rows per kind exist from [`FlushBeforeCommit`] on (a flush claims inside the
//!   writer's transaction, where it only updates rows), and claims create
//!   them again after such a crash;
//! - `outbox_shard_state`, the backoff of each failing shard: attempts, last
//!   delay and error, next attempt;
//! - `outbox_control`, operators' pauses and culls of a shard or a scope,
//!   read by every worker (see `outbox_core::control`);
//! - a nullable `traceparent` on the outbox tables and the dead letters: the
//!   W3C trace context of the span that wrote each row, which its delivery
//!   continues (see `outbox_core::trace`);
//! - `message_id` on the outbox tables and the dead letters: the UUID v7 of
//!   each message, assigned when it is written, that receivers record to
//!   apply it once (see [`MessageIds`]; rows already there get one);
//! - `outbox_inbox`, the message ids each consumer has applied, recorded in
//!   the transaction that applied them (see `outbox_seaorm::inbox`);
//! - `outbox_fence`, the counter of fencing tokens that claims draw (a
//!   sequence on PostgreSQL), and `outbox_inbox_fence`, the highest token
//!   each fenced consumer applied per sender and shard (see
//!   [`FencingTokens`]), with how many deliveries it refused as superseded
//!   ([`SupersededCounts`]);
//! - a nullable `payload_version` on the outbox tables and the dead letters:
//!   the version of the payload's contract a typed writer stored, NULL for an
//!   untyped write (see [`PayloadVersion`] and `outbox_core::contract`).
//!
//! And, opted into with [`migrations_with_partition_ring`] or
//! [`OutboxRingMigrator`]: on PostgreSQL, the outbox tables as a ring of
//! three partitions by id, so that the worker empties a delivered partition
//! with `TRUNCATE` instead of waiting for vacuum, whatever holds the xmin
//! horizon back (see [`OutboxPartitionRing`]).
//!
//! Both PostgreSQL and SQLite are supported.
//!
//! # Adding the migrations to your own migrator
//!
//! Put them first in your migrator's list, before migrations of your own:
//!
//! ```
//! use sea_orm_migration::prelude::*;
//!
//! pub struct Migrator;
//!
//! #[async_trait::async_trait]
//! impl MigratorTrait for Migrator {
//!     fn migrations() -> Vec<Box<dyn MigrationTrait>> {
//!         let mut migrations = outbox_migrations::migrations();
//!         migrations.push(Box::new(m20260101_000001_create_project::Migration));
//!         migrations
//!     }
//! }
//!
//! mod m20260101_000001_create_project {
//!     use sea_orm_migration::prelude::*;
//!
//!     #[derive(DeriveMigrationName)]
//!     pub struct Migration;
//!
//!     #[async_trait::async_trait]
//!     impl MigrationTrait for Migration {
//!         async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
//!             manager
//!                 .get_connection()
//!                 .execute_unprepared("CREATE TABLE project (id bigint PRIMARY KEY, name text NOT NULL)")
//!                 .await?;
//!             Ok(())
//!         }
//!     }
//! }
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), DbErr> {
//! let db = sea_orm_migration::sea_orm::Database::connect("sqlite::memory:").await?;
//! Migrator::up(&db, None).await?;
//!
//! let schema = SchemaManager::new(&db);
//! assert!(schema.has_table("region_outbox").await?);
//! assert!(schema.has_table("control_outbox").await?);
//! assert!(schema.has_table("project").await?);
//! assert!(Migrator::get_pending_migrations(&db).await?.is_empty());
//! # Ok(()) }
//! ```
//!
//! Or run them on their own, tracked in their own table
//! (`outbox_seaql_migrations`), next to whatever migrator you already have:
//!
//! ```
//! use outbox_migrations::OutboxMigrator;
//! use sea_orm_migration::{MigratorTrait, SchemaManager};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), sea_orm_migration::DbErr> {
//! let db = sea_orm_migration::sea_orm::Database::connect("sqlite::memory:").await?;
//! OutboxMigrator::up(&db, None).await?;
//!
//! let schema = SchemaManager::new(&db);
//! assert!(schema.has_table("region_outbox").await?);
//! assert!(schema.has_table("outbox_seaql_migrations").await?); // its own tracking table
//! assert!(!schema.has_table("seaql_migrations").await?); // your migrator's is left alone
//! OutboxMigrator::up(&db, None).await?; // a second run does nothing
//! # Ok(()) }
//! ```
//!
//! [sea-orm-migration]: https://docs.rs/sea-orm-migration

#![cfg_attr(docsrs, feature(doc_cfg))]

use sea_orm_migration::prelude::*;

mod m20261121_000001_create_outbox_tables;
mod m20261121_000002_create_backfill_tables;
mod m20261121_000003_create_dead_letter_table;
mod m20261123_000004_bucket_claims;
mod m20261123_000005_runtime_controls;
mod m20261123_000006_trace_context;
mod m20261123_000007_message_ids;
mod m20261123_000008_inbox;
mod m20261125_000009_flush_before_commit;
mod m20261125_000010_fencing_tokens;
mod m20261125_000011_superseded_counts;
mod m20261126_000012_outbox_autovacuum;
mod m20261126_000013_operator_audit;
mod m20261126_000014_outbox_history;
mod m20261126_000015_outbox_partition_ring;
mod m20261128_000016_payload_version;

pub use m20261121_000001_create_outbox_tables::Migration as CreateOutboxTables;
pub use m20261121_000002_create_backfill_tables::Migration as CreateBackfillTables;
pub use m20261121_000003_create_dead_letter_table::Migration as CreateDeadLetterTable;
pub use m20261123_000004_bucket_claims::Migration as BucketClaims;
pub use m20261123_000005_runtime_controls::Migration as RuntimeControls;
pub use m20261123_000006_trace_context::Migration as TraceContext;
pub use m20261123_000007_message_ids::Migration as MessageIds;
pub use m20261123_000008_inbox::Migration as Inbox;
pub use m20261125_000009_flush_before_commit::Migration as FlushBeforeCommit;
pub use m20261125_000010_fencing_tokens::Migration as FencingTokens;
pub use m20261125_000011_superseded_counts::Migration as SupersededCounts;
pub use m20261126_000012_outbox_autovacuum::Migration as OutboxAutovacuum;
pub use m20261126_000013_operator_audit::Migration as OperatorAudit;
pub use m20261126_000014_outbox_history::Migration as OutboxHistory;
pub use m20261126_000015_outbox_partition_ring::Migration as OutboxPartitionRing;
pub use m20261128_000016_payload_version::Migration as PayloadVersion;

/// Makes the migration's connection read the schema as it is now, on
/// SQLite, before its statements are prepared.
///
/// SQLite prepares a statement against the schema its connection cached
/// when it last read, and notices a change another connection made only
/// when it next reads a table; an `ALTER TABLE` is checked at preparation.
/// `sea-orm-migration` runs SQLite migrations on the pool, so a connection
/// that last read before another one migrated down would find a dropped
/// column still there ("duplicate column name") when migrating up again.
/// Each outbox migration therefore runs in a transaction (one connection,
/// and all of it or none), which starts with this read.
async fn fresh_schema(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    if manager.get_database_backend() == sea_orm::DbBackend::Sqlite {
        manager
            .get_connection()
            .execute_unprepared("SELECT count(*) FROM sqlite_master")
            .await?;
    }
    Ok(())
}

/// The outbox migrations, in order, to append to your own `MigratorTrait::migrations`.
pub fn migrations() -> Vec<Box<dyn MigrationTrait>> {
    vec![
        Box::new(CreateOutboxTables),
        Box::new(CreateBackfillTables),
        Box::new(CreateDeadLetterTable),
        Box::new(BucketClaims),
        Box::new(RuntimeControls),
        Box::new(TraceContext),
        Box::new(MessageIds),
        Box::new(Inbox),
        Box::new(FlushBeforeCommit),
        Box::new(FencingTokens),
        Box::new(SupersededCounts),
        Box::new(OutboxAutovacuum),
        Box::new(OperatorAudit),
        Box::new(OutboxHistory),
        Box::new(PayloadVersion),
    ]
}

/// [`migrations()`] and then [`OutboxPartitionRing`], the PostgreSQL outbox
/// tables as a ring of partitions that the worker truncates once drained:
/// for databases where something may hold vacuum's horizon back (long
/// reports, `pg_dump`, sessions left idle in a transaction, lagging
/// replication slots). It bounds the outbox's size whatever the horizon,
/// and costs the drain on deep backlogs (see "Vacuum and long transactions"
/// in the repository's `docs/operations.md`). Nothing changes on SQLite.
pub fn migrations_with_partition_ring() -> Vec<Box<dyn MigrationTrait>> {
    let mut migrations = migrations();
    migrations.push(Box::new(OutboxPartitionRing));
    migrations
}

/// [`OutboxMigrator`] with the partition ring
/// ([`migrations_with_partition_ring`]), tracked in the same table: a
/// database migrated by [`OutboxMigrator`] opts in by running this one's
/// `up`, and opts out by its `down` of one step.
#[derive(Debug, Clone, Copy, Default)]
pub struct OutboxRingMigrator;

#[async_trait::async_trait]
impl MigratorTrait for OutboxRingMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        migrations_with_partition_ring()
    }

    /// [`OutboxMigrator`]'s: one history for both.
    fn migration_table_name() -> sea_orm::DynIden {
        OutboxMigrator::migration_table_name()
    }
}

/// A migrator that runs only the outbox migrations, tracked in the
/// `outbox_seaql_migrations` table so it never clashes with your own migrator.
#[derive(Debug, Clone, Copy, Default)]
pub struct OutboxMigrator;

#[async_trait::async_trait]
impl MigratorTrait for OutboxMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        migrations()
    }

    fn migration_table_name() -> sea_orm::DynIden {
        "outbox_seaql_migrations".into_iden()
    }
}
