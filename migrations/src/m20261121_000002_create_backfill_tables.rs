//! Creates `outbox_backfill_cursor` and `outbox_option`.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// Backfill cursors (one per replicated table) and runtime options (such as
/// the replication version a backfill may advance to), kept in the database
/// so a backfill needs no other service.
#[derive(Debug, Clone, Copy, Default)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261121_000002_create_backfill_tables"
    }
}

// The trait is declared with a hidden lifetime; its impl must match it.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// In a transaction on SQLite too, which starts with a read of the
    /// schema: a pooled SQLite connection would otherwise check its
    /// statements against the schema it cached at its last read.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::fresh_schema(manager).await?;
        let backend = manager.get_database_backend();
        if !matches!(backend, DbBackend::Postgres | DbBackend::Sqlite) {
            return Err(DbErr::Migration(format!(
                "the outbox tables support PostgreSQL and SQLite, not {backend:?}"
            )));
        }
        let db = manager.get_connection();
        db.execute_unprepared(
            "CREATE TABLE outbox_backfill_cursor (
                table_name text PRIMARY KEY,
                lower_bound_id bigint NOT NULL,
                version integer NOT NULL
            )",
        )
        .await?;
        db.execute_unprepared(
            "CREATE TABLE outbox_option (
                key text PRIMARY KEY,
                value text NOT NULL
            )",
        )
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::fresh_schema(manager).await?;
        let db = manager.get_connection();
        db.execute_unprepared("DROP TABLE outbox_option").await?;
        db.execute_unprepared("DROP TABLE outbox_backfill_cursor")
            .await?;
        Ok(())
    }
}
