-- Completes finished synchronous flushes, many in one statement (outbox_core's
-- completer), each fenced by its own token: releases the live leases of
-- each flush's buckets that still carry its token, and deletes the
-- delivered rows of the buckets released. The caller sends each bucket
-- once, and a token leases only buckets of the flush it completes, so a
-- bucket whose token is one of them carries its own. Does not wait for the
-- WAL flush (see commit_finished.sql).
-- The arrays are read through `(SELECT $n)`, an init plan whose value the
-- planner cannot see: a custom plan, which sees how few elements they have,
-- would otherwise always look cheaper than the generic one, and PostgreSQL
-- would plan every call anew (costing more than running it).
-- $1 kind, $2 now, $3 buckets, $4 the flushes' tokens, $5 ids. Returns the
-- buckets released and where their rows are now (the store's `addresses.rs`).
WITH relaxed AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
), released AS (
    UPDATE outbox_claim_bucket b
    SET token = NULL, owner = NULL, lease_until = $2, version = b.version + 1
    WHERE b.kind = $1 AND b.bucket = ANY((SELECT $3::int[])::int[]) AND b.lease_until > $2
      AND b.token = ANY((SELECT $4::bigint[])::bigint[])
    RETURNING b.bucket, b.ctid::text AS address
), deleted AS (
    -- A hashed subplan, not a semi-join (see commit_finished.sql).
    DELETE FROM {table} o
    WHERE o.id = ANY((SELECT $5::bigint[])::bigint[])
      AND (((((o.shard_identifier % 1024) + (o.shard_scope % 1024) * 37) % 1024 + 1024) % 1024)::int
          = ANY (SELECT bucket FROM released)) IS TRUE
    RETURNING 1
)
SELECT ARRAY(SELECT bucket FROM released) AS owned,
       ARRAY(SELECT address FROM released) AS addresses,
       (SELECT count(*) FROM deleted) AS deleted,
       (SELECT setting FROM relaxed) AS synchronous_commit
