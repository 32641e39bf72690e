//! Creates `outbox_dead_letter`.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// Rows of scopes that opted into dead-lettering, moved aside after their
/// last allowed attempt, with the error; replayable (same ids).
#[derive(Debug, Clone, Copy, Default)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261121_000003_create_dead_letter_table"
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
        let (json, timestamp) = match manager.get_database_backend() {
            DbBackend::Postgres => ("jsonb", "timestamptz"),
            DbBackend::Sqlite => ("json_text", "timestamp_text"),
            other => {
                return Err(DbErr::Migration(format!(
                    "the outbox tables support PostgreSQL and SQLite, not {other:?}"
                )))
            }
        };
        manager
            .get_connection()
            .execute_unprepared(&format!(
                "CREATE TABLE outbox_dead_letter (
                    kind smallint NOT NULL,
                    id bigint NOT NULL,
                    region_name text NOT NULL DEFAULT '',
                    shard_scope integer NOT NULL,
                    shard_identifier bigint NOT NULL,
                    category integer NOT NULL,
                    object_identifier bigint NOT NULL,
                    payload {json} NULL,
                    scheduled_from {timestamp} NOT NULL,
                    scheduled_for {timestamp} NOT NULL,
                    date_added {timestamp} NOT NULL,
                    error text NOT NULL,
                    dead_lettered_at {timestamp} NOT NULL,
                    PRIMARY KEY (kind, id)
                )"
            ))
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::fresh_schema(manager).await?;
        manager
            .get_connection()
            .execute_unprepared("DROP TABLE outbox_dead_letter")
            .await?;
        Ok(())
    }
}
