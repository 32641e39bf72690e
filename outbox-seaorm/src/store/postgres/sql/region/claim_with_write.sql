-- The outbox insert of a write that also claims the one shard it writes,
-- for the synchronous flush (outbox_core's `write_claim`): the claim before
-- the commit (claim_one_before_commit.sql) made by the insert's statement,
-- one round trip sooner. `{insert}` is the write's INSERT (it takes the
-- shard's lock, rule 11, before it draws an id) with `RETURNING *`.
-- $kind, $region, $scope, $identifier, $bucket, $now, $token, $owner,
-- $lease_until, $rows stand for the parameters after the insert's.
--
-- Leases the bucket as claim_one_before_commit.sql does, never waiting: a
-- bucket that a live lease holds, or that another open transaction has
-- locked, is left (found held); a bucket this transaction leased already
-- (the same token: an earlier write of the request) is taken again. The
-- shard's older pending rows are read by outbox_region_rows_before (see the
-- migration m20261127_000016_write_claims) once the insert has drawn its
-- ids and the bucket is leased: a function that reads with a snapshot of
-- its own, taken then, so that it sees the row of a writer of the shard
-- that committed while the insert waited for the shard's lock (this
-- statement's snapshot, taken before, does not). The inserted rows come
-- back as written.
-- Every result row repeats `claimed`, the state and the fence; `part` 0
-- rows are the older ones, `part` 1 the inserted ones.
WITH ins AS (
    {insert}
), state AS (
    SELECT attempts, last_backoff_ms, retry_at, last_error, failed_at
    FROM outbox_shard_state
    WHERE kind = $kind AND region_name = $region AND shard_scope = $scope
      AND shard_identifier = $identifier
), snapshot AS (
    SELECT version FROM outbox_claim_bucket WHERE kind = $kind AND bucket = $bucket
), locked AS (
    SELECT b.bucket FROM outbox_claim_bucket b, snapshot s
    WHERE b.kind = $kind AND b.bucket = $bucket AND b.version = s.version
      AND (b.lease_until <= $now OR b.token = $token)
      AND current_setting('transaction_isolation') = 'read committed'
      AND NOT EXISTS (SELECT 1 FROM state WHERE retry_at > $now)
    FOR UPDATE OF b SKIP LOCKED
), claimed AS (
    UPDATE outbox_claim_bucket b
    SET token = $token, owner = $owner, lease_until = $lease_until, version = b.version + 1
    WHERE b.kind = $kind AND b.bucket = (SELECT bucket FROM locked)
    RETURNING b.bucket
), fence AS MATERIALIZED (
    -- The claim's fencing token (outbox_core::fence), drawn once a bucket
    -- is leased (this claim never creates a bucket row: see
    -- claim_due_newest.sql for what a created one does to the sequence).
    SELECT nextval('outbox_fence') AS value WHERE EXISTS (SELECT 1 FROM claimed)
), older AS MATERIALIZED (
    -- Its arguments run the insert and the lease first.
    SELECT * FROM outbox_region_rows_before(
        $scope, $identifier, (SELECT min(id) FROM ins), $rows, (SELECT bucket FROM claimed))
)
SELECT 0 AS part, (SELECT count(*) FROM claimed) AS claimed,
       st.attempts, st.last_backoff_ms, st.retry_at, st.last_error, st.failed_at,
       o.id, o.category, o.object_identifier, o.payload, o.scheduled_from, o.scheduled_for,
       o.date_added, o.traceparent, o.message_id, (SELECT value FROM fence) AS fence
FROM older o
LEFT JOIN state st ON true
UNION ALL
SELECT 1, (SELECT count(*) FROM claimed),
       st.attempts, st.last_backoff_ms, st.retry_at, st.last_error, st.failed_at,
       i.id, i.category, i.object_identifier, i.payload, i.scheduled_from, i.scheduled_for,
       i.date_added, i.traceparent, i.message_id, (SELECT value FROM fence)
FROM ins i
LEFT JOIN state st ON true
ORDER BY 1, 8
