-- The first statement of a commit's transaction: releases the token's live
-- leases that no shard still in flight needs, renews the others, and returns
-- the buckets the token still held (fencing).
-- $1 kind, $2 token, $3 now, $4 buckets kept as JSON, $5 new end of the kept
-- leases, $6 every bucket of the batch as JSON.
UPDATE outbox_claim_bucket
SET token = CASE WHEN bucket IN (SELECT value FROM json_each($4)) THEN token END,
    owner = CASE WHEN bucket IN (SELECT value FROM json_each($4)) THEN owner END,
    lease_until = CASE WHEN bucket IN (SELECT value FROM json_each($4)) THEN $5 ELSE $3 END,
    version = version + 1
WHERE kind = $1 AND bucket IN (SELECT value FROM json_each($6)) AND token = $2
  AND lease_until > $3
RETURNING bucket
