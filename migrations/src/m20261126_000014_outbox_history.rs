//! Creates `outbox_history`: the samples every worker records with its
//! gauges (depth, oldest age, deliveries, failures, dead letters, per table
//! and scope), for the dashboard's charts; pruned after a retention.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// One row per sample time, table, scope (`''` for the whole table) and
/// worker: a few thousand rows a day per worker.
#[derive(Debug, Clone, Copy, Default)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261126_000014_outbox_history"
    }
}

// The trait is declared with a hidden lifetime; its impl must match it.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// In a transaction on SQLite too (see `fresh_schema`).
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
        let db = manager.get_connection();
        db.execute_unprepared(&format!(
            "CREATE TABLE outbox_history (
                at {timestamp} NOT NULL,
                kind smallint NOT NULL,
                scope text NOT NULL,
                owner text NOT NULL,
                depth bigint NOT NULL,
                oldest_age_ms bigint NULL,
                delivered bigint NOT NULL,
                failed bigint NOT NULL,
                dead_lettered bigint NOT NULL,
                dead_letters bigint NOT NULL,
                PRIMARY KEY (kind, at, scope, owner)
            )"
        ))
        .await?;
        // Pruning by age, across kinds.
        db.execute_unprepared("CREATE INDEX outbox_history_at ON outbox_history (at)")
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::fresh_schema(manager).await?;
        manager
            .get_connection()
            .execute_unprepared("DROP TABLE outbox_history")
            .await?;
        Ok(())
    }
}
