//! Turns each PostgreSQL outbox table into a ring of three partitions by id,
//! so that delivered rows leave by `TRUNCATE` instead of waiting for vacuum.
//!
//! Opted into, not one of [`crate::migrations()`]: add it after them
//! ([`crate::migrations_with_partition_ring`], [`crate::OutboxRingMigrator`]).
//! It bounds the outbox's size whatever holds vacuum's horizon back, and
//! costs the drain on deep backlogs (each statement reads three partitions;
//! measured: `cargo bench -p outbox-seaorm --bench drain` with
//! `OUTBOX_BENCH_RING=1`); choose it where long transactions, dumps or
//! lagging replicas are a fact of life.
//!
//! Every delivered row is a `DELETE`. While vacuum keeps up, that is cheap;
//! when something holds the xmin horizon back (a long report, `pg_dump`, an
//! `idle in transaction` session, a lagging replication slot), vacuum may
//! not remove a dead row, and the table and its indexes grow with every
//! delivery until the horizon moves: claims step over the dead entries, and
//! the table stays large after. `TRUNCATE` does not care about the horizon.
//!
//! `region_outbox` and `control_outbox` become `PARTITION BY LIST (((id /
//! 20000) % 3))`, partitions `{table}_p0`, `_p1`, `_p2`: ids 0–19,999 go to
//! p0, 20,000–39,999 to p1, 40,000–59,999 to p2, 60,000 to p0 again, and so
//! on. The worker (`outbox_seaorm::ring`) empties a partition that the
//! sequence has moved past once every row in it is delivered, with
//! `TRUNCATE` under a short lock timeout, and never one that a transaction
//! is writing into. A partition that still holds a pending row (a shard
//! backing off, paused, quarantined) is not emptied; the ring goes on around
//! it, and its new rows share it with the old: order and delivery do not
//! depend on partitions, only the size does.
//!
//! What changes for the tables: ids come from a sequence of their own
//! (`{table}_ids`, continuing where the identity column was; PostgreSQL 15
//! allows no identity column on a partitioned table), `id` is indexed but not
//! a primary key (a unique index on a partitioned table must contain its
//! partition key, here an expression; the sequence keeps ids unique), and
//! the autovacuum settings of `m20261126_000012_outbox_autovacuum` are set
//! on each partition (a partitioned table stores none).
//!
//! The migration copies the pending rows into the new table and takes an
//! exclusive lock on the old one meanwhile: writers wait for it, longer the
//! more rows are pending. Run it with the backlog drained. The
//! down migration copies them back into a plain table with an identity
//! primary key. SQLite has one writer and no horizon to hold back: nothing
//! changes there.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// Partitions the PostgreSQL outbox tables into a ring of three by id.
#[derive(Debug, Clone, Copy, Default)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261126_000015_outbox_partition_ring"
    }
}

/// Ids per partition.
const SPAN: i64 = 20_000;
/// Partitions per table.
const PARTITIONS: i64 = 3;

/// The outbox tables, with the columns their shard index has before the
/// shard's.
const TABLES: [(&str, &str); 2] = [("region_outbox", ""), ("control_outbox", "region_name, ")];

/// The autovacuum settings of `m20261126_000012_outbox_autovacuum`.
const AUTOVACUUM: &str =
    "autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0.01";

// The trait is declared with a hidden lifetime; its impl must match it.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// In one transaction: a failure leaves the tables as they were.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::fresh_schema(manager).await?;
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let db = manager.get_connection();
        for (table, region) in TABLES {
            db.execute_unprepared(&partition(table, region)).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::fresh_schema(manager).await?;
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let db = manager.get_connection();
        for (table, region) in TABLES {
            db.execute_unprepared(&unpartition(table, region)).await?;
        }
        Ok(())
    }
}

/// The statements that replace the plain `table` with its ring.
fn partition(table: &str, region: &str) -> String {
    let mut sql = format!(
        "LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE;
         CREATE SEQUENCE {table}_ids AS bigint;
         SELECT setval('{table}_ids', GREATEST(
             (SELECT max(id) FROM {table}),
             (SELECT last_value FROM pg_sequences
              WHERE schemaname = current_schema() AND sequencename = '{table}_id_seq'
                AND last_value IS NOT NULL),
             0) + 1, false);
         ALTER TABLE {table} RENAME TO {table}_unpartitioned;
         ALTER INDEX {table}_due RENAME TO {table}_unpartitioned_due;
         ALTER INDEX {table}_shard RENAME TO {table}_unpartitioned_shard;
         CREATE TABLE {table} (LIKE {table}_unpartitioned INCLUDING DEFAULTS INCLUDING STORAGE)
             PARTITION BY LIST (((id / {SPAN}) % {PARTITIONS}));
         ALTER TABLE {table} ALTER COLUMN id SET DEFAULT nextval('{table}_ids');
         ALTER SEQUENCE {table}_ids OWNED BY {table}.id;
"
    );
    for p in 0..PARTITIONS {
        sql.push_str(&format!(
            "CREATE TABLE {table}_p{p} PARTITION OF {table} FOR VALUES IN ({p}) WITH ({AUTOVACUUM});\n"
        ));
    }
    sql.push_str(&format!(
        "CREATE INDEX {table}_id ON {table} (id);
         CREATE INDEX {table}_due ON {table} (scheduled_for, id);
         CREATE INDEX {table}_shard ON {table} ({region}shard_scope, shard_identifier, id);
         INSERT INTO {table} SELECT * FROM {table}_unpartitioned;
         DROP TABLE {table}_unpartitioned;"
    ));
    sql
}

/// The statements that put the plain `table` back, rows and ids included.
fn unpartition(table: &str, region: &str) -> String {
    format!(
        "LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE;
         ALTER TABLE {table} RENAME TO {table}_ring;
         ALTER INDEX {table}_due RENAME TO {table}_ring_due;
         ALTER INDEX {table}_shard RENAME TO {table}_ring_shard;
         CREATE TABLE {table} (LIKE {table}_ring INCLUDING DEFAULTS INCLUDING STORAGE)
             WITH ({AUTOVACUUM});
         ALTER TABLE {table} ALTER COLUMN id DROP DEFAULT;
         ALTER TABLE {table} ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY;
         ALTER TABLE {table} ADD PRIMARY KEY (id);
         CREATE INDEX {table}_due ON {table} (scheduled_for, id);
         CREATE INDEX {table}_shard ON {table} ({region}shard_scope, shard_identifier, id);
         INSERT INTO {table} OVERRIDING SYSTEM VALUE SELECT * FROM {table}_ring;
         SELECT setval(pg_get_serial_sequence('{table}', 'id'), GREATEST(
             (SELECT max(id) FROM {table}),
             (SELECT last_value FROM pg_sequences
              WHERE schemaname = current_schema() AND sequencename = '{table}_ids'
                AND last_value IS NOT NULL),
             0) + 1, false);
         DROP TABLE {table}_ring;"
    )
}
