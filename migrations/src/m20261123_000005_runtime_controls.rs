//! Creates `outbox_control`: operators' pauses and culls, read by every
//! worker of every process.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// One row per target: a shard (`whole_scope` false) or every shard of a
/// scope (`whole_scope` true, `shard_identifier` 0); `action` 1 pause, 2
/// cull. A small table: every worker reads it whole about once a second.
#[derive(Debug, Clone, Copy, Default)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261123_000005_runtime_controls"
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
        let timestamp = match manager.get_database_backend() {
            DbBackend::Postgres => "timestamptz",
            DbBackend::Sqlite => "timestamp_text",
            other => {
                return Err(DbErr::Migration(format!(
                    "the outbox tables support PostgreSQL and SQLite, not {other:?}"
                )))
            }
        };
        manager
            .get_connection()
            .execute_unprepared(&format!(
                "CREATE TABLE outbox_control (
                    kind smallint NOT NULL,
                    region_name text NOT NULL DEFAULT '',
                    shard_scope integer NOT NULL,
                    whole_scope boolean NOT NULL,
                    shard_identifier bigint NOT NULL,
                    action smallint NOT NULL,
                    reason text NULL,
                    created_at {timestamp} NOT NULL,
                    PRIMARY KEY (kind, region_name, shard_scope, whole_scope, shard_identifier)
                )"
            ))
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::fresh_schema(manager).await?;
        manager
            .get_connection()
            .execute_unprepared("DROP TABLE outbox_control")
            .await?;
        Ok(())
    }
}
