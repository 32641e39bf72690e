-- Whether a live lease holds a bucket. $1 kind, $2 bucket, $3 now.
SELECT 1 AS held FROM outbox_claim_bucket WHERE kind = $1 AND bucket = $2 AND lease_until > $3
