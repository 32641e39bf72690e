-- Creates the missing bucket rows of $2, free (they appear on first use).
-- $1 kind, $2 buckets, $3 the past.
INSERT INTO outbox_claim_bucket (kind, bucket, token, owner, lease_until, version)
SELECT $1, b, NULL, NULL, $3, 0 FROM unnest($2::int[]) AS b
ORDER BY b
ON CONFLICT DO NOTHING
