//! Creates `outbox_audit`: the operators' actions on the outbox (who, when,
//! what, on what, why, and how it ended), written by the admin API, its
//! dashboard and the CLI, pruned after a retention.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// One row per action, refused ones too; `id` increases with each. Small:
/// operators act a few times a day.
#[derive(Debug, Clone, Copy, Default)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261126_000013_operator_audit"
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
        let (id, timestamp) = match manager.get_database_backend() {
            DbBackend::Postgres => (
                "bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
                "timestamptz",
            ),
            DbBackend::Sqlite => ("integer PRIMARY KEY AUTOINCREMENT", "timestamp_text"),
            other => {
                return Err(DbErr::Migration(format!(
                    "the outbox tables support PostgreSQL and SQLite, not {other:?}"
                )))
            }
        };
        let db = manager.get_connection();
        db.execute_unprepared(&format!(
            "CREATE TABLE outbox_audit (
                id {id},
                at {timestamp} NOT NULL,
                actor text NOT NULL,
                role text NOT NULL,
                action text NOT NULL,
                target text NULL,
                reason text NULL,
                outcome text NOT NULL,
                detail text NULL
            )"
        ))
        .await?;
        // Pruning by age.
        db.execute_unprepared("CREATE INDEX outbox_audit_at ON outbox_audit (at)")
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::fresh_schema(manager).await?;
        manager
            .get_connection()
            .execute_unprepared("DROP TABLE outbox_audit")
            .await?;
        Ok(())
    }
}
