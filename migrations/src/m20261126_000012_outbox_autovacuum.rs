//! Autovacuum settings for the outbox tables, on PostgreSQL.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// The outbox tables are queues: every delivered row is deleted, so their
/// dead tuples grow with the traffic while their live rows stay few. By
/// default autovacuum waits for dead tuples to reach 20 % of the live rows
/// (plus 50): on a backlog of a million rows, 200,000 dead ones that every
/// claim steps over first. This sets, on `region_outbox` and
/// `control_outbox`, a threshold of 1,000 dead tuples plus 1 % of the live
/// rows (`autovacuum_vacuum_threshold`, `autovacuum_vacuum_scale_factor`).
///
/// Storage parameters only: no rewrite, no lock beyond a brief `SHARE UPDATE
/// EXCLUSIVE`, allowed on managed PostgreSQL, and a DBA's own
/// `ALTER TABLE … SET` wins afterwards (this runs once). SQLite has no
/// autovacuum of this kind: nothing to do there.
#[derive(Debug, Clone, Copy, Default)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261126_000012_outbox_autovacuum"
    }
}

/// The tables and the settings.
const TABLES: [&str; 2] = ["region_outbox", "control_outbox"];
const SETTINGS: &str = "autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0.01";
const NAMES: &str = "autovacuum_vacuum_threshold, autovacuum_vacuum_scale_factor";

// The trait is declared with a hidden lifetime; its impl must match it.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// In a transaction, which on SQLite starts with a read of the schema
    /// (see `fresh_schema` in this crate).
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        alter_tables(manager, &format!("SET ({SETTINGS})")).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        alter_tables(manager, &format!("RESET ({NAMES})")).await
    }
}

/// `ALTER TABLE <table> <change>` on each outbox table, on PostgreSQL.
async fn alter_tables(manager: &SchemaManager<'_>, change: &str) -> Result<(), DbErr> {
    crate::fresh_schema(manager).await?;
    if manager.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    for table in TABLES {
        manager
            .get_connection()
            .execute_unprepared(&format!("ALTER TABLE {table} {change}"))
            .await?;
    }
    Ok(())
}
