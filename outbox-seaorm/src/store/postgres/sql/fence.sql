-- The first statement of a commit's transaction: row-locks the token's live
-- leases of the buckets of the batch's shards and of those still in flight,
-- releases those no shard still in flight needs, renews the others,
-- and returns the buckets the token still held (fencing: a commit writes
-- only for shards of those buckets). Its transaction does not wait for the
-- WAL flush (see commit_finished.sql).
-- $1 kind, $2 token, $3 now, $4 buckets kept, $5 new end of the kept leases,
-- $6 every bucket of the batch.
WITH relaxed AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
)
UPDATE outbox_claim_bucket b
SET token = CASE WHEN b.bucket = ANY($4::int[]) THEN b.token END,
    owner = CASE WHEN b.bucket = ANY($4::int[]) THEN b.owner END,
    lease_until = CASE WHEN b.bucket = ANY($4::int[]) THEN $5 ELSE $3 END,
    version = b.version + 1
FROM relaxed
WHERE b.kind = $1 AND b.bucket = ANY($6::int[]) AND b.token = $2 AND b.lease_until > $3
RETURNING b.bucket
