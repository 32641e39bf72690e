-- Locks the buckets of $2 that no lease holds at $3, for a change of shard
-- states outside a claim (`retry_now`), and bumps their `version`, so that a
-- claim whose snapshot predates this change cannot lease them (see
-- claim_due_newest.sql). Buckets are locked in key order, like claims lock them.
-- Bucket rows appear on first use: `create_buckets.sql` runs first.
-- $1 kind, $2 buckets, $3 now.
WITH free AS (
    SELECT bucket FROM outbox_claim_bucket
    WHERE kind = $1 AND bucket = ANY($2::int[]) AND lease_until <= $3
    ORDER BY bucket
    FOR UPDATE
)
UPDATE outbox_claim_bucket b SET version = b.version + 1
FROM free f
WHERE b.kind = $1 AND b.bucket = f.bucket
RETURNING b.bucket
