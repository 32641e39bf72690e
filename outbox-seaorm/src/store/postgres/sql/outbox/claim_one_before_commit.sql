-- Leases, inside the writer's transaction and just before its commit, the
-- bucket of the one shard it wrote, and reads that shard's rows: the
-- synchronous flush claimed before the commit (outbox_core's
-- `ClaimBeforeCommit`; claim_before_commit.sql does several shards). The
-- commit makes the lease visible with the rows; a rollback takes both
-- back. Never waits: a bucket that a live lease holds, or that another
-- open transaction has locked (a drain's claim, another request's claim
-- before its commit), is skipped; so is a bucket row that does not exist
-- (a drain creates it again after a crash emptied the unlogged table: an
-- insert here would hold its key until this transaction ends). A shard
-- that backs off takes no lease. Claims nothing unless the transaction is
-- READ COMMITTED: under a stricter isolation, a bucket row changed since
-- the transaction's snapshot would fail it.
-- Scalar parameters only, unlike the several-shards statement: PostgreSQL
-- then plans it once per connection (a generic plan), where array sizes
-- it can only guess make it plan every call anew.
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
    SELECT b.bucket FROM outbox_claim_bucket b, snapshot s
    WHERE b.kind = $1 AND b.bucket = $5 AND b.version = s.version AND b.lease_until <= $6
      AND current_setting('transaction_isolation') = 'read committed'
      AND NOT EXISTS (SELECT 1 FROM state WHERE retry_at > $6)
    FOR UPDATE OF b SKIP LOCKED
), claimed AS (
    UPDATE outbox_claim_bucket b
    SET token = $7, owner = $8, lease_until = $9, version = b.version + 1
    WHERE b.kind = $1 AND b.bucket = (SELECT bucket FROM locked)
    RETURNING b.bucket
), fence AS MATERIALIZED (
    -- The claim's fencing token (outbox_core::fence), drawn once a bucket
    -- is leased (this claim never creates a bucket row: see
    -- claim_due_newest.sql for what a created one does to the sequence).
    SELECT nextval('outbox_fence') AS value WHERE EXISTS (SELECT 1 FROM claimed)
)
SELECT (SELECT count(*) FROM claimed) AS claimed,
       st.attempts, st.last_backoff_ms, st.retry_at, st.last_error, st.failed_at,
       o.id, o.category, o.object_identifier, o.payload, o.scheduled_from, o.scheduled_for,
       o.date_added, o.traceparent, o.message_id, o.payload_version,
       (SELECT value FROM fence) AS fence
FROM (SELECT 1) AS one
LEFT JOIN state st ON true
LEFT JOIN LATERAL (
    SELECT * FROM {table} o
    WHERE EXISTS (SELECT 1 FROM claimed)
      AND {key_eq:o=$2,$3,$4}
      AND (o.shard_identifier, o.id) > ($4, -9223372036854775807::bigint)
      AND (o.shard_identifier, o.id) <= ($4, $10)
    -- In the shard index's order (see claim_due_newest.sql).
    ORDER BY {key:o}, o.id
    LIMIT $11
) o ON true
ORDER BY o.id
