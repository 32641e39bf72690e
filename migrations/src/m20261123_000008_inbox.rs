//! Creates `outbox_inbox`, the message ids that receivers have applied.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// `outbox_inbox (consumer, message_id, received_at)`: one row per message
/// a consumer applied, written in the transaction that applied it, so that a
/// redelivery (a crash between the receiver's commit and the outbox delete)
/// is recognised and skipped (see `outbox_seaorm::inbox`). Keyed by
/// `(consumer, message_id)`; `received_at` is indexed for pruning.
/// A new table: nothing to rewrite.
#[derive(Debug, Clone, Copy, Default)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261123_000008_inbox"
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
        let (uuid, timestamp) = match manager.get_database_backend() {
            DbBackend::Postgres => ("uuid", "timestamptz"),
            // A UUID's 16 bytes, as sqlx writes it; fixed-width UTC
            // timestamps, like the outbox tables'.
            DbBackend::Sqlite => ("blob", "text"),
            other => {
                return Err(DbErr::Migration(format!(
                    "the outbox tables support PostgreSQL and SQLite, not {other:?}"
                )))
            }
        };
        let db = manager.get_connection();
        db.execute_unprepared(&format!(
            "CREATE TABLE outbox_inbox (
                consumer text NOT NULL,
                message_id {uuid} NOT NULL,
                received_at {timestamp} NOT NULL,
                PRIMARY KEY (consumer, message_id)
            )"
        ))
        .await?;
        db.execute_unprepared(
            "CREATE INDEX outbox_inbox_received_at ON outbox_inbox (received_at)",
        )
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::fresh_schema(manager).await?;
        manager
            .get_connection()
            .execute_unprepared("DROP TABLE outbox_inbox")
            .await?;
        Ok(())
    }
}
