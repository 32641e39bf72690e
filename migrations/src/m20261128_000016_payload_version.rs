//! Adds `payload_version` to the outbox tables and the dead letters.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// The version of the payload's contract that a typed writer stored with a
/// row (`outbox_core::contract`), or NULL for an untyped write, which a
/// typed receiver reads as version 1: on `region_outbox`, `control_outbox`
/// and `outbox_dead_letter` (a replayed dead letter keeps it). A nullable
/// column without a default: adding it rewrites no row, so it is safe on
/// tables that already hold rows, and rows written before it read as
/// untyped writes. (`outbox_history` holds the workers' samples, no
/// messages: it gets none.)
#[derive(Debug, Clone, Copy, Default)]
pub struct Migration;

/// The tables that get the column.
const TABLES: [&str; 3] = ["region_outbox", "control_outbox", "outbox_dead_letter"];

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261128_000016_payload_version"
    }
}

fn supported(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    match manager.get_database_backend() {
        DbBackend::Postgres | DbBackend::Sqlite => Ok(()),
        other => Err(DbErr::Migration(format!(
            "the outbox tables support PostgreSQL and SQLite, not {other:?}"
        ))),
    }
}

// The trait is declared with a hidden lifetime; its impl must match it.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// In a transaction on SQLite too, which starts with a read of the
    /// schema (see `fresh_schema`).
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::fresh_schema(manager).await?;
        supported(manager)?;
        // On the partition ring (PostgreSQL), a column added to the
        // partitioned table is added to each partition.
        for table in TABLES {
            manager
                .get_connection()
                .execute_unprepared(&format!(
                    "ALTER TABLE {table} ADD COLUMN payload_version integer NULL"
                ))
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::fresh_schema(manager).await?;
        supported(manager)?;
        // SQLite drops columns since 3.35 (the bundled one is newer).
        for table in TABLES {
            manager
                .get_connection()
                .execute_unprepared(&format!("ALTER TABLE {table} DROP COLUMN payload_version"))
                .await?;
        }
        Ok(())
    }
}
