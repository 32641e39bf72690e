//! Fencing tokens (rule 12): the counter claims draw them from, and the
//! highest token each fenced receiver applied per shard.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// - `outbox_fence`, the counter of fencing tokens: every claim draws one,
///   so a later claim of a shard has a higher token (see
///   `outbox_core::fence`). On PostgreSQL a sequence, read by the claim's
///   own statement (logged, unlike the claim table: a crash does not
///   restart it); on SQLite a one-row table, updated in the claim's
///   transaction.
/// - `outbox_inbox_fence (consumer, sender, shard, fence, applied_at)`: the
///   highest fencing token a consumer applied per sender and shard, written
///   in the transaction that applied the change, so that a delivery with a
///   lower one is refused as superseded (see `outbox_seaorm::inbox`).
///
/// New objects: nothing to rewrite.
#[derive(Debug, Clone, Copy, Default)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261125_000010_fencing_tokens"
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
            DbBackend::Postgres => {
                db.execute_unprepared("CREATE SEQUENCE outbox_fence AS bigint")
                    .await?;
                "timestamptz"
            }
            DbBackend::Sqlite => {
                db.execute_unprepared(
                    "CREATE TABLE outbox_fence (
                        id integer PRIMARY KEY CHECK (id = 1),
                        value integer NOT NULL
                    )",
                )
                .await?;
                db.execute_unprepared("INSERT INTO outbox_fence (id, value) VALUES (1, 0)")
                    .await?;
                "text"
            }
            other => {
                return Err(DbErr::Migration(format!(
                    "the outbox tables support PostgreSQL and SQLite, not {other:?}"
                )))
            }
        };
        db.execute_unprepared(&format!(
            "CREATE TABLE outbox_inbox_fence (
                consumer text NOT NULL,
                sender text NOT NULL,
                shard text NOT NULL,
                fence bigint NOT NULL,
                applied_at {timestamp} NOT NULL,
                PRIMARY KEY (consumer, sender, shard)
            )"
        ))
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::fresh_schema(manager).await?;
        let db = manager.get_connection();
        db.execute_unprepared("DROP TABLE outbox_inbox_fence")
            .await?;
        match manager.get_database_backend() {
            DbBackend::Postgres => db.execute_unprepared("DROP SEQUENCE outbox_fence").await?,
            _ => db.execute_unprepared("DROP TABLE outbox_fence").await?,
        };
        Ok(())
    }
}
