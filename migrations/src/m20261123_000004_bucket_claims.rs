//! Replaces the claim row per shard (`outbox_shard_claim`) with claim buckets
//! (`outbox_claim_bucket`) and backoff states (`outbox_shard_state`).
//!
//! A worker now leases buckets of shards (1,024 per outbox kind, the bucket
//! of a shard being a function of its scope and identifier) by updating a
//! few existing rows, instead of inserting and deleting a row per shard. A
//! failing shard's backoff lives apart, in `outbox_shard_state`, written only
//! when a delivery fails or a failing shard recovers.
//!
//! Safe on tables that hold rows: the backoffs recorded in the old claim
//! table move to the new state table; rows that a backoff rescheduled but
//! whose state was lost (the old claim table was unlogged, and a server crash
//! empties such tables) are made due again, so that a shard without a state
//! never holds rescheduled rows (the drain relies on it to read a shard's
//! rows in id order). The down migration restores the old claim table with
//! the backoffs, without live claims (they are leases, and end anyway).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// Creates `outbox_claim_bucket` and `outbox_shard_state` from
/// `outbox_shard_claim`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261123_000004_bucket_claims"
    }
}

/// How one backend spells what differs.
struct Dialect {
    unlogged: &'static str,
    fillfactor: &'static str,
    timestamp: &'static str,
    the_past: &'static str,
}

fn dialect(backend: DbBackend) -> Result<Dialect, DbErr> {
    match backend {
        DbBackend::Postgres => Ok(Dialect {
            unlogged: "UNLOGGED ",
            // Room on each page for the updated copies of a row (HOT).
            fillfactor: " WITH (fillfactor = 50)",
            timestamp: "timestamptz",
            the_past: "'2016-08-01 00:00:00+00'",
        }),
        DbBackend::Sqlite => Ok(Dialect {
            unlogged: "",
            fillfactor: "",
            timestamp: "timestamp_text",
            the_past: "'2016-08-01T00:00:00.000000+00:00'",
        }),
        other => Err(DbErr::Migration(format!(
            "the outbox tables support PostgreSQL and SQLite, not {other:?}"
        ))),
    }
}

fn up_statements(d: &Dialect) -> Vec<String> {
    let Dialect {
        unlogged,
        fillfactor,
        timestamp,
        the_past,
    } = d;
    let mut statements = vec![
        // Leases. Unlogged on PostgreSQL: no WAL, and a crash that empties
        // the table only ends leases, which fencing makes safe. Rows appear
        // on first use; `version` grows with every claim and release.
        format!(
            "CREATE {unlogged}TABLE outbox_claim_bucket (
                kind smallint NOT NULL,
                bucket integer NOT NULL,
                token bigint NULL,
                owner text NULL,
                lease_until {timestamp} NOT NULL,
                version bigint NOT NULL DEFAULT 0,
                PRIMARY KEY (kind, bucket)
            ){fillfactor}"
        ),
        // Failing shards; logged, since rows rescheduled by a backoff must
        // never outlive their state.
        format!(
            "CREATE TABLE outbox_shard_state (
                kind smallint NOT NULL,
                region_name text NOT NULL DEFAULT '',
                shard_scope integer NOT NULL,
                shard_identifier bigint NOT NULL,
                attempts integer NOT NULL,
                last_backoff_ms bigint NULL,
                retry_at {timestamp} NOT NULL,
                last_error text NULL,
                failed_at {timestamp} NOT NULL,
                PRIMARY KEY (kind, region_name, shard_scope, shard_identifier)
            )"
        ),
        "INSERT INTO outbox_shard_state
            (kind, region_name, shard_scope, shard_identifier, attempts, last_backoff_ms,
             retry_at, last_error, failed_at)
         SELECT kind, region_name, shard_scope, shard_identifier, attempts, last_backoff_ms,
                lease_until, last_error, lease_until
         FROM outbox_shard_claim
         WHERE owner IS NULL"
            .to_owned(),
    ];
    for (table, kind, region) in [
        ("region_outbox", 0, "''"),
        ("control_outbox", 1, "o.region_name"),
    ] {
        statements.push(format!(
            "UPDATE {table} AS o SET scheduled_for = {the_past}
             WHERE o.scheduled_for > {the_past} AND NOT EXISTS (
                 SELECT 1 FROM outbox_shard_state s
                 WHERE s.kind = {kind} AND s.region_name = {region}
                   AND s.shard_scope = o.shard_scope AND s.shard_identifier = o.shard_identifier)"
        ));
    }
    statements.push("DROP TABLE outbox_shard_claim".to_owned());
    statements
}

fn down_statements(d: &Dialect) -> Vec<String> {
    let Dialect {
        unlogged,
        timestamp,
        ..
    } = d;
    vec![
        format!(
            "CREATE {unlogged}TABLE outbox_shard_claim (
                kind smallint NOT NULL,
                region_name text NOT NULL DEFAULT '',
                shard_scope integer NOT NULL,
                shard_identifier bigint NOT NULL,
                token bigint NOT NULL,
                owner text NULL,
                lease_until {timestamp} NOT NULL,
                last_backoff_ms bigint NULL,
                attempts integer NOT NULL DEFAULT 0,
                last_error text NULL,
                PRIMARY KEY (kind, region_name, shard_scope, shard_identifier)
            )"
        ),
        "CREATE INDEX outbox_shard_claim_token ON outbox_shard_claim (token)".to_owned(),
        "INSERT INTO outbox_shard_claim
            (kind, region_name, shard_scope, shard_identifier, token, owner, lease_until,
             last_backoff_ms, attempts, last_error)
         SELECT kind, region_name, shard_scope, shard_identifier, 0, NULL, retry_at,
                last_backoff_ms, attempts, last_error
         FROM outbox_shard_state"
            .to_owned(),
        "DROP TABLE outbox_shard_state".to_owned(),
        "DROP TABLE outbox_claim_bucket".to_owned(),
    ]
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
        let statements = up_statements(&dialect(manager.get_database_backend())?);
        run(manager, &statements).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::fresh_schema(manager).await?;
        let statements = down_statements(&dialect(manager.get_database_backend())?);
        run(manager, &statements).await
    }
}

async fn run(manager: &SchemaManager<'_>, statements: &[String]) -> Result<(), DbErr> {
    let db = manager.get_connection();
    for statement in statements {
        db.execute_unprepared(statement).await?;
    }
    Ok(())
}
