//! Adds `message_id` to the outbox tables and the dead letters, and gives
//! every row already there one.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend, Statement, Value};
use uuid::{NoContext, Timestamp, Uuid};

/// The message id of each row: a UUID v7, assigned when the row is written,
/// on `region_outbox`, `control_outbox` and `outbox_dead_letter` (a dead
/// letter and its replay keep it). `uuid` on PostgreSQL, its 16 bytes
/// (`blob`, what sqlx reads as a `Uuid`) on SQLite.
///
/// Safe on tables that hold rows: the column is added nullable and without a
/// default, which rewrites no row (PostgreSQL takes its lock for an instant),
/// then the rows already there get ids in batches of
/// [`BATCH`](Migration::BATCH), each a v7 id of the row's `date_added`. Rows
/// that a binary older than this migration still writes during a rolling
/// deploy stay null, and are delivered with an id derived from the row
/// (`outbox_core::message::derived_message_id`), the same on every delivery.
#[derive(Debug, Clone, Copy, Default)]
pub struct Migration;

impl Migration {
    /// Rows given an id per statement.
    pub const BATCH: usize = 500;
}

/// The tables that get the column, and the columns that identify a row.
const TABLES: [(&str, &str); 3] = [
    ("region_outbox", "id"),
    ("control_outbox", "id"),
    ("outbox_dead_letter", "kind, id"),
];

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261123_000007_message_ids"
    }
}

fn backend(manager: &SchemaManager<'_>) -> Result<DbBackend, DbErr> {
    match manager.get_database_backend() {
        backend @ (DbBackend::Postgres | DbBackend::Sqlite) => Ok(backend),
        other => Err(DbErr::Migration(format!(
            "the outbox tables support PostgreSQL and SQLite, not {other:?}"
        ))),
    }
}

/// A v7 id whose time is `millis` since the Unix epoch.
fn v7_at(millis: i64) -> Uuid {
    let millis = <u64 as std::convert::TryFrom<i64>>::try_from(millis).unwrap_or(0);
    let nanos =
        <u32 as std::convert::TryFrom<u64>>::try_from((millis % 1000) * 1_000_000).unwrap_or(0);
    Uuid::new_v7(Timestamp::from_unix(NoContext, millis / 1000, nanos))
}

/// Gives ids to the rows of `table` that have none, a batch at a time;
/// returns how many.
async fn fill(
    db: &impl ConnectionTrait,
    backend: DbBackend,
    table: &str,
    key: &str,
) -> Result<u64, DbErr> {
    let millis = match backend {
        DbBackend::Postgres => "(extract(epoch FROM date_added) * 1000)::bigint",
        // Timestamps are fixed-width UTC text (`2026-11-21T19:27:37.123456+00:00`).
        _ => "CAST((julianday(date_added) - 2440587.5) * 86400000 AS INTEGER)",
    };
    let dead_letters = key.contains("kind");
    let select = format!(
        "SELECT {key}, {millis} AS millis FROM {table} WHERE message_id IS NULL ORDER BY {key} LIMIT {}",
        Migration::BATCH
    );
    let mut filled = 0;
    loop {
        let rows = db
            .query_all_raw(Statement::from_string(backend, select.clone()))
            .await?;
        if rows.is_empty() {
            return Ok(filled);
        }
        // One statement per batch: `CASE` over the batch's keys.
        let mut values: Vec<Value> = Vec::with_capacity(rows.len() * 3);
        let mut cases = String::new();
        let mut keys = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: i64 = row.try_get("", "id")?;
            let millis: i64 = row.try_get("", "millis")?;
            let condition = if dead_letters {
                let kind: i16 = row.try_get("", "kind")?;
                values.push(kind.into());
                values.push(id.into());
                format!("(kind = ${} AND id = ${})", values.len() - 1, values.len())
            } else {
                values.push(id.into());
                format!("id = ${}", values.len())
            };
            values.push(v7_at(millis).into());
            cases.push_str(&format!(" WHEN {condition} THEN ${}", values.len()));
            keys.push(condition);
        }
        let update = format!(
            "UPDATE {table} SET message_id = CASE{cases} END WHERE message_id IS NULL AND ({})",
            keys.join(" OR ")
        );
        db.execute_raw(Statement::from_sql_and_values(backend, update, values))
            .await?;
        filled += rows.len() as u64;
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
        let backend = backend(manager)?;
        let db = manager.get_connection();
        let column_type = match backend {
            DbBackend::Postgres => "uuid",
            _ => "blob",
        };
        for (table, key) in TABLES {
            db.execute_unprepared(&format!(
                "ALTER TABLE {table} ADD COLUMN message_id {column_type} NULL"
            ))
            .await?;
            fill(db, backend, table, key).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::fresh_schema(manager).await?;
        backend(manager)?;
        // SQLite drops columns since 3.35 (the bundled one is newer).
        for (table, _) in TABLES {
            manager
                .get_connection()
                .execute_unprepared(&format!("ALTER TABLE {table} DROP COLUMN message_id"))
                .await?;
        }
        Ok(())
    }
}
