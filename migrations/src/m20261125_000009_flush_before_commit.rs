//! Makes the synchronous flush cheaper: creates every claim bucket row up
//! front, and drops the coalescing-group index that no statement used.
//!
//! **Bucket rows.** They used to appear on first use, inserted by the claim
//! that needed them. A synchronous flush now claims its shards' buckets
//! inside the writer's own transaction, just before its commit (see
//! `outbox_core::ClaimBeforeCommit`), and there it may only *update* a row
//! that exists: an insert would hold the bucket's key until the request
//! commits, and a drain inserting the same key would wait for it. So all
//! 1,024 rows of each kind are created here, free. On PostgreSQL the bucket
//! table is `UNLOGGED`, and a server crash empties it; until a drain has
//! created a missing row again (its claims still insert them), a flush finds
//! that bucket held.
//!
//! **The group index.** `{table}_group` on `({region_name,} shard_scope,
//! shard_identifier, category, object_identifier)` served no statement: a
//! claim reads a shard's rows in id order through `{table}_shard` and folds
//! them into coalescing groups in memory, and a delivered group is deleted by
//! id. Every index costs each write (the request's `INSERT`) and each delete
//! of the drain, in time and in WAL; this one only cost.
//!
//! Safe on tables that hold rows: existing bucket rows are kept, and `DROP
//! INDEX` takes a brief exclusive lock. The down migration builds the index
//! again (on a large table that blocks writes to it for a few seconds per
//! million rows) and leaves the bucket rows, which claims would create
//! anyway.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// Creates the missing rows of `outbox_claim_bucket`; drops
/// `region_outbox_group` and `control_outbox_group`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261125_000009_flush_before_commit"
    }
}

/// The outbox tables, with the columns their group index had before the
/// shard's.
const TABLES: [(&str, &str); 2] = [("region_outbox", ""), ("control_outbox", "region_name, ")];

/// Every bucket of both kinds, free (a lease that ended in 2016).
fn create_buckets(backend: DbBackend) -> Result<String, DbErr> {
    let (buckets, the_past) = match backend {
        DbBackend::Postgres => (
            "SELECT k, b FROM generate_series(0, 1) AS k, generate_series(0, 1023) AS b",
            "'2016-08-01 00:00:00+00'",
        ),
        DbBackend::Sqlite => (
            "WITH RECURSIVE n(b) AS (SELECT 0 UNION ALL SELECT b + 1 FROM n WHERE b < 1023) \
             SELECT k.k AS k, n.b AS b FROM n, (SELECT 0 AS k UNION ALL SELECT 1) AS k",
            "'2016-08-01T00:00:00.000000+00:00'",
        ),
        other => {
            return Err(DbErr::Migration(format!(
                "the outbox tables support PostgreSQL and SQLite, not {other:?}"
            )))
        }
    };
    // `WHERE true`: SQLite needs it to parse `ON CONFLICT` after a SELECT.
    Ok(format!(
        "INSERT INTO outbox_claim_bucket (kind, bucket, token, owner, lease_until, version) \
         SELECT s.k, s.b, NULL, NULL, {the_past}, 0 FROM ({buckets}) AS s WHERE true \
         ON CONFLICT (kind, bucket) DO NOTHING"
    ))
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
        let sql = create_buckets(backend)?;
        let db = manager.get_connection();
        db.execute_unprepared(&sql).await?;
        if backend == DbBackend::Postgres {
            // Statistics for the planner: without them it takes the table
            // for a dozen rows, and the claims' generic plans (sqlx prepares
            // their statements) scan every bucket of a kind to find one.
            db.execute_unprepared("ANALYZE outbox_claim_bucket").await?;
        }
        for (table, _) in TABLES {
            db.execute_unprepared(&format!("DROP INDEX IF EXISTS {table}_group"))
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::fresh_schema(manager).await?;
        // Checks the backend.
        create_buckets(manager.get_database_backend())?;
        let db = manager.get_connection();
        for (table, region) in TABLES {
            db.execute_unprepared(&format!(
                "CREATE INDEX IF NOT EXISTS {table}_group ON {table} \
                 ({region}shard_scope, shard_identifier, category, object_identifier)"
            ))
            .await?;
        }
        Ok(())
    }
}
