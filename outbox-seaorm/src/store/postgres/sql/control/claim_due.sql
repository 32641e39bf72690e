-- Leases the free buckets that hold the oldest due rows and returns the rows
-- of their shards, in one statement.
-- $1 kind, $2 now, $3 highest id, $4 rows scanned, $5 buckets at most,
-- $6 token, $7 owner, $8 lease end.
--
-- The rows come from this statement's snapshot, taken before the leases. A
-- bucket released after the snapshot may have lost rows the snapshot still
-- shows (its holder delivered and deleted them), so a bucket is leased only
-- if its row is unchanged since the snapshot (`version` grows with every
-- claim and release; FOR UPDATE rechecks the condition on the newest
-- version).
--
-- Written to plan well generically (sqlx prepares statements, and PostgreSQL
-- plans a prepared statement generically after five runs, with no idea of
-- how many rows a CTE holds): tables are reached through their indexes with
-- `= ANY(ARRAY(…))`, and set membership is tested with
-- `(… = ANY (SELECT …)) IS TRUE`, a hashed subplan, never a join a generic
-- plan could turn into nested loops over CTEs.
WITH held AS MATERIALIZED (
    SELECT bucket FROM outbox_claim_bucket WHERE kind = $1 AND lease_until > $2
), candidates AS MATERIALIZED (
    -- The oldest due rows of free buckets, in index order: a bounded scan.
    -- Whole rows: most of them are leased, and fetching the leased ones
    -- again by id costs more than carrying the others.
    SELECT o.id, o.region_name, o.shard_scope, o.shard_identifier, o.category,
           o.object_identifier, o.payload, o.scheduled_from, o.scheduled_for, o.date_added, o.traceparent, o.message_id,
           ((((o.shard_identifier % 1024) + (o.shard_scope % 1024) * 37) % 1024 + 1024) % 1024)::int
               AS bucket
    FROM control_outbox o
    WHERE o.scheduled_for <= $2 AND o.id <= $3
      AND ((((o.shard_identifier % 1024) + (o.shard_scope % 1024) * 37) % 1024 + 1024) % 1024)::int
          NOT IN (SELECT bucket FROM held)
    ORDER BY o.scheduled_for, o.id
    LIMIT $4
), wanted AS MATERIALIZED (
    SELECT bucket FROM candidates
    GROUP BY bucket ORDER BY min(id) LIMIT $5
), snapshot AS MATERIALIZED (
    SELECT b.bucket, b.version FROM outbox_claim_bucket b
    WHERE b.kind = $1 AND b.bucket = ANY(ARRAY(SELECT bucket FROM wanted))
      AND b.lease_until <= $2
), locked AS MATERIALIZED (
    SELECT b.bucket FROM outbox_claim_bucket b
    WHERE b.kind = $1 AND b.bucket = ANY(ARRAY(SELECT bucket FROM snapshot))
      AND ((b.bucket, b.version) = ANY (SELECT bucket, version FROM snapshot)) IS TRUE
    ORDER BY b.bucket
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE outbox_claim_bucket b
    SET token = $6, owner = $7, lease_until = $8, version = b.version + 1
    WHERE b.kind = $1 AND b.bucket = ANY(ARRAY(SELECT bucket FROM locked))
    RETURNING b.bucket
), created AS (
    -- A bucket's row appears on first use (and again after a crash empties
    -- the unlogged table).
    INSERT INTO outbox_claim_bucket (kind, bucket, token, owner, lease_until, version)
    SELECT $1, w.bucket, $6, $7, $8, 1 FROM wanted w
    WHERE (w.bucket = ANY (
        SELECT b.bucket FROM outbox_claim_bucket b WHERE b.kind = $1)) IS NOT TRUE
    ORDER BY w.bucket
    ON CONFLICT DO NOTHING
    RETURNING bucket
), mine AS MATERIALIZED (
    SELECT bucket FROM claimed UNION ALL SELECT bucket FROM created
), taken AS MATERIALIZED (
    SELECT c.* FROM candidates c
    WHERE (c.bucket = ANY (SELECT bucket FROM mine)) IS TRUE
), states AS MATERIALIZED (
    SELECT s.region_name, s.shard_scope, s.shard_identifier, s.attempts, s.last_backoff_ms, s.retry_at,
           s.last_error, s.failed_at
    FROM outbox_shard_state s
    WHERE s.kind = $1
      AND ((s.region_name, s.shard_scope, s.shard_identifier) = ANY (
          SELECT region_name, shard_scope, shard_identifier FROM taken)) IS TRUE
)
-- Shards without a backoff state: all their rows are due since 2016, so
-- their candidates are a prefix of their rows in id order.
SELECT o.id, o.region_name, o.shard_scope, o.shard_identifier, o.category,
       o.object_identifier, o.payload, o.scheduled_from, o.scheduled_for, o.date_added, o.traceparent, o.message_id,
       NULL::int AS attempts, NULL::bigint AS last_backoff_ms,
       NULL::timestamptz AS retry_at, NULL::text AS last_error, NULL::timestamptz AS failed_at
FROM taken o
WHERE ((o.region_name, o.shard_scope, o.shard_identifier) = ANY (
      SELECT region_name, shard_scope, shard_identifier FROM states)) IS NOT TRUE
UNION ALL
-- Shards with one: their rescheduled rows sort after newer due ones, so they
-- are read in id order; none while the backoff runs (only the state).
SELECT o.id, s.region_name, s.shard_scope, s.shard_identifier, o.category,
       o.object_identifier, o.payload, o.scheduled_from, o.scheduled_for, o.date_added, o.traceparent, o.message_id,
       s.attempts, s.last_backoff_ms, s.retry_at, s.last_error, s.failed_at
FROM states s
LEFT JOIN LATERAL (
    SELECT * FROM control_outbox o
    WHERE s.retry_at <= $2
      AND o.region_name = s.region_name AND o.shard_scope = s.shard_scope
      AND o.shard_identifier = s.shard_identifier AND o.id <= $3
    ORDER BY o.id
    LIMIT $4
) o ON true
ORDER BY id NULLS LAST
