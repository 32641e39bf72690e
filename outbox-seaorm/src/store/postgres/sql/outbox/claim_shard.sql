-- Leases the bucket of one shard and reads its rows (the synchronous flush
-- claimed after the commit), unless another worker holds the bucket or the
-- shard backs off.
-- $1 kind, $2 region, $3 scope, $4 identifier, $5 bucket, $6 now, $7 token,
-- $8 owner, $9 lease end, $10 highest id, $11 rows.
-- Every result row repeats `claimed` and the state; row columns are null
-- when nothing was claimed or the shard has no rows.
-- The bucket is leased only if unchanged since this statement's snapshot,
-- which the read uses (see claim_due_newest.sql).
WITH state AS (
    SELECT attempts, last_backoff_ms, retry_at, last_error, failed_at
    FROM outbox_shard_state
    WHERE kind = $1 AND region_name = $2 AND shard_scope = $3 AND shard_identifier = $4
), snapshot AS (
    SELECT version FROM outbox_claim_bucket WHERE kind = $1 AND bucket = $5
), locked AS (
    -- Skips a bucket another transaction has locked (a drain's claim, a
    -- request's claim before its commit): never waits for it.
    SELECT b.bucket FROM outbox_claim_bucket b, snapshot s
    WHERE b.kind = $1 AND b.bucket = $5 AND b.version = s.version AND b.lease_until <= $6
      AND NOT EXISTS (SELECT 1 FROM state WHERE retry_at > $6)
    FOR UPDATE OF b SKIP LOCKED
), claimed AS (
    UPDATE outbox_claim_bucket b
    SET token = $7, owner = $8, lease_until = $9, version = b.version + 1
    WHERE b.kind = $1 AND b.bucket = (SELECT bucket FROM locked)
    RETURNING b.bucket
), created AS (
    INSERT INTO outbox_claim_bucket (kind, bucket, token, owner, lease_until, version)
    SELECT $1, $5, $7, $8, $9, 1
    WHERE NOT EXISTS (SELECT 1 FROM snapshot)
      AND NOT EXISTS (SELECT 1 FROM state WHERE retry_at > $6)
    ON CONFLICT DO NOTHING
    RETURNING bucket
), mine AS (
    SELECT bucket FROM claimed UNION ALL SELECT bucket FROM created
), fence AS MATERIALIZED (
    -- The claim's fencing token (outbox_core::fence), drawn once a bucket
    -- is leased. Creating a bucket row again (a crash emptied the unlogged
    -- table) first moves the sequence a million forward: past any value
    -- handed out before the crash that the sequence had not written to disk.
    SELECT CASE WHEN EXISTS (SELECT 1 FROM created)
                THEN setval('outbox_fence', nextval('outbox_fence') + 1048576)
                ELSE nextval('outbox_fence') END AS value
    WHERE EXISTS (SELECT 1 FROM mine)
)
SELECT (SELECT count(*) FROM mine) AS claimed,
       st.attempts, st.last_backoff_ms, st.retry_at, st.last_error, st.failed_at,
       o.id, o.category, o.object_identifier, o.payload, o.scheduled_from, o.scheduled_for,
       o.date_added, o.traceparent, o.message_id, o.payload_version,
       (SELECT value FROM fence) AS fence
FROM (SELECT 1) AS one
LEFT JOIN state st ON true
LEFT JOIN LATERAL (
    SELECT * FROM {table} o
    WHERE EXISTS (SELECT 1 FROM mine)
      AND {key_eq:o=$2,$3,$4}
      AND (o.shard_identifier, o.id) > ($4, -9223372036854775807::bigint)
      AND (o.shard_identifier, o.id) <= ($4, $10)
    -- In the shard index's order (see claim_due_newest.sql).
    ORDER BY {key:o}, o.id
    LIMIT $11
) o ON true
ORDER BY o.id
