-- Leases, inside the writer's transaction and just before its commit, the
-- buckets of the shards it wrote, and reads those shards' rows: the
-- synchronous flush claimed before the commit (outbox_core's
-- `ClaimBeforeCommit`). The commit makes the leases visible with the rows;
-- a rollback takes both back. Never waits: a bucket that a live lease
-- holds, or that another open transaction has locked (a drain's claim,
-- another request's claim before its commit), is skipped; so is a bucket
-- row that does not exist (a drain creates it again after a crash emptied
-- the unlogged table: an insert here would hold its key until this
-- transaction ends). A shard that backs off takes no lease. Claims nothing
-- unless the transaction is READ COMMITTED: under a stricter isolation, a
-- bucket row changed since the transaction's snapshot would fail it.
-- $1 kind, $2 now, $3 token, $4 owner, $5 lease end, $6 regions, $7 scopes,
-- $8 identifiers, $9 highest ids, $10 rows per shard, $11 the shards'
-- buckets (given, so that the bucket rows are reached through their key
-- whatever a generic plan guesses of the CTEs).
-- One result row per shard row read, with the shard's position `ord` (from
-- 1), whether its bucket was claimed, and its backoff state; a shard
-- without rows to deliver gets one result row, its row columns null.
-- A bucket is leased only if unchanged since this statement's snapshot,
-- which the read uses (see claim_due_newest.sql).
WITH shards AS MATERIALIZED (
    SELECT s.ord, s.region_name, s.shard_scope, s.shard_identifier, s.up_to,
           ((((s.shard_identifier % 1024) + (s.shard_scope % 1024) * 37) % 1024 + 1024) % 1024)::int
               AS bucket
    FROM unnest($6::text[], $7::int[], $8::bigint[], $9::bigint[])
         WITH ORDINALITY AS s(region_name, shard_scope, shard_identifier, up_to, ord)
), states AS MATERIALIZED (
    SELECT sh.ord, st.attempts, st.last_backoff_ms, st.retry_at, st.last_error, st.failed_at
    FROM shards sh
    JOIN outbox_shard_state st
      ON st.kind = $1 AND st.region_name = sh.region_name
     AND st.shard_scope = sh.shard_scope AND st.shard_identifier = sh.shard_identifier
), wanted AS MATERIALIZED (
    SELECT DISTINCT sh.bucket FROM shards sh
    WHERE current_setting('transaction_isolation') = 'read committed'
      AND (sh.ord = ANY (SELECT ord FROM states WHERE retry_at > $2)) IS NOT TRUE
), snapshot AS MATERIALIZED (
    SELECT b.bucket, b.version FROM outbox_claim_bucket b
    WHERE b.kind = $1 AND b.bucket = ANY($11::int[]) AND b.lease_until <= $2
      AND (b.bucket = ANY (SELECT bucket FROM wanted)) IS TRUE
), locked AS MATERIALIZED (
    SELECT b.bucket FROM outbox_claim_bucket b
    WHERE b.kind = $1 AND b.bucket = ANY($11::int[])
      AND ((b.bucket, b.version) = ANY (SELECT bucket, version FROM snapshot)) IS TRUE
    ORDER BY b.bucket
    FOR UPDATE SKIP LOCKED
), claimed AS MATERIALIZED (
    UPDATE outbox_claim_bucket b
    SET token = $3, owner = $4, lease_until = $5, version = b.version + 1
    WHERE b.kind = $1 AND b.bucket = ANY($11::int[])
      AND (b.bucket = ANY (SELECT bucket FROM locked)) IS TRUE
    RETURNING b.bucket
), fence AS MATERIALIZED (
    -- The claim's fencing token (outbox_core::fence), drawn once a bucket
    -- is leased (this claim never creates a bucket row: see
    -- claim_due_newest.sql for what a created one does to the sequence).
    SELECT nextval('outbox_fence') AS value WHERE EXISTS (SELECT 1 FROM claimed)
)
SELECT sh.ord, (sh.bucket = ANY (SELECT bucket FROM claimed)) IS TRUE AS claimed,
       st.attempts, st.last_backoff_ms, st.retry_at, st.last_error, st.failed_at,
       o.id, o.category, o.object_identifier, o.payload, o.scheduled_from, o.scheduled_for,
       o.date_added, o.traceparent, o.message_id, o.payload_version,
       (SELECT value FROM fence) AS fence
FROM shards sh
LEFT JOIN states st ON st.ord = sh.ord
LEFT JOIN LATERAL (
    SELECT * FROM {table} o
    WHERE (sh.bucket = ANY (SELECT bucket FROM claimed)) IS TRUE
      AND (st.retry_at IS NULL OR st.retry_at <= $2)
      AND {key_eq:o=sh}
      AND (o.shard_identifier, o.id) > (sh.shard_identifier, -9223372036854775807::bigint)
      AND (o.shard_identifier, o.id) <= (sh.shard_identifier, sh.up_to)
    -- In the shard index's order (see claim_due_newest.sql).
    ORDER BY {key:o}, o.id
    LIMIT $10
) o ON true
ORDER BY sh.ord, o.id
