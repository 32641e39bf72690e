-- Leases the free buckets that hold the oldest due rows and returns the rows
-- of their shards, in one statement.
-- $1 kind, $2 now, $3 highest id, $4 rows scanned, $5 buckets at most,
-- $6 token, $7 owner, $8 lease end.
--
-- The rows come from this statement's snapshot, taken before the leases. A
-- bucket released after the snapshot may have lost rows the snapshot still
-- shows (its holder delivered and deleted them), so a bucket is leased only
-- if its row is unchanged since the snapshot (`version` grows with every
-- claim and release; FOR UPDATE rechecks the join on the newest version).
WITH held AS MATERIALIZED (
    SELECT bucket FROM outbox_claim_bucket WHERE kind = $1 AND lease_until > $2
), candidates AS MATERIALIZED (
    -- The oldest due rows of free buckets, in index order: a bounded scan.
    SELECT o.id, o.region_name, o.shard_scope, o.shard_identifier, o.category,
           o.object_identifier, o.payload, o.scheduled_from, o.scheduled_for, o.date_added,
           ((((o.shard_identifier % 1024) + (o.shard_scope % 1024) * 37) % 1024 + 1024) % 1024)::int
               AS bucket
    FROM control_outbox o
    WHERE o.scheduled_for <= $2 AND o.id <= $3
      AND ((((o.shard_identifier % 1024) + (o.shard_scope % 1024) * 37) % 1024 + 1024) % 1024)::int
          <> ALL (ARRAY(SELECT bucket FROM held))
    ORDER BY o.scheduled_for, o.id
    LIMIT $4
), wanted AS (
    SELECT bucket, min(id) AS first_id FROM candidates
    GROUP BY bucket ORDER BY first_id LIMIT $5
), snapshot AS (
    SELECT b.bucket, b.version FROM outbox_claim_bucket b
    WHERE b.kind = $1 AND b.bucket = ANY(ARRAY(SELECT bucket FROM wanted))
      AND b.lease_until <= $2
), locked AS (
    SELECT b.bucket FROM outbox_claim_bucket b
    JOIN snapshot s ON s.bucket = b.bucket AND s.version = b.version
    WHERE b.kind = $1
    ORDER BY b.bucket
    FOR UPDATE OF b SKIP LOCKED
), claimed AS (
    UPDATE outbox_claim_bucket b
    SET token = $6, owner = $7, lease_until = $8, version = b.version + 1
    FROM locked l
    WHERE b.kind = $1 AND b.bucket = l.bucket
    RETURNING b.bucket
), created AS (
    -- A bucket's row appears on first use (and again after a crash empties
    -- the unlogged table).
    INSERT INTO outbox_claim_bucket (kind, bucket, token, owner, lease_until, version)
    SELECT $1, w.bucket, $6, $7, $8, 1 FROM wanted w
    WHERE NOT EXISTS (
        SELECT 1 FROM outbox_claim_bucket b WHERE b.kind = $1 AND b.bucket = w.bucket)
    ORDER BY w.bucket
    ON CONFLICT DO NOTHING
    RETURNING bucket
), mine AS (
    SELECT bucket FROM claimed UNION ALL SELECT bucket FROM created
), states AS MATERIALIZED (
    SELECT s.region_name, s.shard_scope, s.shard_identifier, s.attempts, s.last_backoff_ms, s.retry_at,
           s.last_error, s.failed_at
    FROM outbox_shard_state s
    WHERE s.kind = $1
      AND (s.region_name, s.shard_scope, s.shard_identifier) IN (
          SELECT c.region_name, c.shard_scope, c.shard_identifier FROM candidates c
          WHERE c.bucket = ANY(ARRAY(SELECT bucket FROM mine)))
)
-- Shards without a backoff state: all their rows are due since 2016, so
-- their candidates are a prefix of their rows in id order.
SELECT c.id, c.region_name, c.shard_scope, c.shard_identifier, c.category,
       c.object_identifier, c.payload, c.scheduled_from, c.scheduled_for, c.date_added,
       NULL::int AS attempts, NULL::bigint AS last_backoff_ms,
       NULL::timestamptz AS retry_at, NULL::text AS last_error, NULL::timestamptz AS failed_at
FROM candidates c
WHERE c.bucket = ANY(ARRAY(SELECT bucket FROM mine))
  AND NOT EXISTS (
      SELECT 1 FROM states s
      WHERE s.region_name = c.region_name AND s.shard_scope = c.shard_scope
        AND s.shard_identifier = c.shard_identifier)
UNION ALL
-- Shards with one: their rescheduled rows sort after newer due ones, so they
-- are read in id order; none while the backoff runs (only the state).
SELECT o.id, s.region_name, s.shard_scope, s.shard_identifier, o.category,
       o.object_identifier, o.payload, o.scheduled_from, o.scheduled_for, o.date_added,
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
