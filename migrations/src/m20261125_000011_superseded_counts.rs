//! How many deliveries each fenced receiver refused as superseded, per
//! sender and shard, for operators.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// Adds to `outbox_inbox_fence` the count of deliveries refused as
/// superseded (`superseded`, 0 for existing rows) and when the last one was
/// (`superseded_at`, null until one is): written by the refusal itself, so
/// that an operator sees on the receiving side's dashboard which senders'
/// workers were paused past their lease, and how often.
///
/// New columns with a constant default: nothing to rewrite.
#[derive(Debug, Clone, Copy, Default)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261125_000011_superseded_counts"
    }
}

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
        crate::fresh_schema(manager).await?;
        let db = manager.get_connection();
        let timestamp = match manager.get_database_backend() {
            DbBackend::Postgres => "timestamptz",
            DbBackend::Sqlite => "text",
            other => {
                return Err(DbErr::Migration(format!(
                    "the outbox tables support PostgreSQL and SQLite, not {other:?}"
                )))
            }
        };
        db.execute_unprepared(
            "ALTER TABLE outbox_inbox_fence ADD COLUMN superseded bigint NOT NULL DEFAULT 0",
        )
        .await?;
        db.execute_unprepared(&format!(
            "ALTER TABLE outbox_inbox_fence ADD COLUMN superseded_at {timestamp}"
        ))
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::fresh_schema(manager).await?;
        let db = manager.get_connection();
        db.execute_unprepared("ALTER TABLE outbox_inbox_fence DROP COLUMN superseded_at")
            .await?;
        db.execute_unprepared("ALTER TABLE outbox_inbox_fence DROP COLUMN superseded")
            .await?;
        Ok(())
    }
}
