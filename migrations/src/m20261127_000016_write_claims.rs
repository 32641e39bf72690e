//! Creates, on PostgreSQL, the functions with which a synchronous flush
//! claims its shard in the outbox insert itself (`outbox_seaorm`'s write
//! API, inside an `OutboxLayer` request): `outbox_region_rows_before` and
//! `outbox_control_rows_before` read a shard's pending rows below an id.
//!
//! The insert takes the shard's transaction-level lock (rule 11) and may
//! wait in it for another writer of the shard to commit; a statement reads
//! as of its start, so it would not see that writer's row, whose id is
//! lower than its own. A `VOLATILE` function reads with a snapshot of its
//! own, taken when it runs: called with the inserted id, after the lock, it
//! sees every row of the shard committed before. PL/pgSQL, so that it is
//! never inlined into the calling statement (which would give it the
//! statement's snapshot) and its plan is kept per connection; its body
//! names the tables at run time, so the partition ring
//! (`m20261126_000015_outbox_partition_ring`) may rebuild them. Nothing on
//! SQLite: one transaction writes at a time there, and no claim is taken
//! with an insert.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// The read-below functions of the claim taken with an outbox insert.
#[derive(Debug, Clone, Copy, Default)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261127_000016_write_claims"
    }
}

/// The columns a claim returns of each row, with their types.
const ROW: &str = "id bigint, category integer, object_identifier bigint, payload jsonb, \
    scheduled_from timestamptz, scheduled_for timestamptz, date_added timestamptz, \
    traceparent text, message_id uuid";

/// The same columns of `o`, in order.
const SELECTED: &str = "o.id, o.category, o.object_identifier, o.payload, o.scheduled_from, \
    o.scheduled_for, o.date_added, o.traceparent, o.message_id";

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
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let db = manager.get_connection();
        // The pending rows of one shard with ids below `below`, oldest
        // first, at most `max_rows`; none unless `leased` (the bucket the
        // caller's claim took: an argument, so that the claim has run
        // before this read) and `below` are set. In the shard index's
        // order, from the shard's first entry.
        db.execute_unprepared(&format!(
            "CREATE FUNCTION outbox_region_rows_before(
                scope integer, identifier bigint, below bigint, max_rows bigint, leased integer)
            RETURNS TABLE ({ROW}) LANGUAGE plpgsql VOLATILE AS $body$
            BEGIN
                IF leased IS NULL OR below IS NULL THEN
                    RETURN;
                END IF;
                RETURN QUERY SELECT {SELECTED} FROM region_outbox o
                    WHERE (o.shard_scope, o.shard_identifier, o.id)
                          > (scope, identifier, -9223372036854775807::bigint)
                      AND (o.shard_scope, o.shard_identifier, o.id) < (scope, identifier, below)
                    ORDER BY o.shard_scope, o.shard_identifier, o.id
                    LIMIT max_rows;
            END
            $body$"
        ))
        .await?;
        db.execute_unprepared(&format!(
            "CREATE FUNCTION outbox_control_rows_before(
                region text, scope integer, identifier bigint, below bigint, max_rows bigint,
                leased integer)
            RETURNS TABLE ({ROW}) LANGUAGE plpgsql VOLATILE AS $body$
            BEGIN
                IF leased IS NULL OR below IS NULL THEN
                    RETURN;
                END IF;
                RETURN QUERY SELECT {SELECTED} FROM control_outbox o
                    WHERE (o.region_name, o.shard_scope, o.shard_identifier, o.id)
                          > (region, scope, identifier, -9223372036854775807::bigint)
                      AND (o.region_name, o.shard_scope, o.shard_identifier, o.id)
                          < (region, scope, identifier, below)
                    ORDER BY o.region_name, o.shard_scope, o.shard_identifier, o.id
                    LIMIT max_rows;
            END
            $body$"
        ))
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::fresh_schema(manager).await?;
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let db = manager.get_connection();
        db.execute_unprepared(
            "DROP FUNCTION outbox_region_rows_before(integer, bigint, bigint, bigint, integer)",
        )
        .await?;
        db.execute_unprepared(
            "DROP FUNCTION outbox_control_rows_before(text, integer, bigint, bigint, bigint, integer)",
        )
        .await?;
        Ok(())
    }
}
