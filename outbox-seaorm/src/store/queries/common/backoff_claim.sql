-- Turns a claim into the shard's backoff. $1 kind, $2 token, $3 region, $4 scope,
-- $5 identifier, $6 retry at, $7 delay in ms, $8 error, $9 failed attempts.
UPDATE outbox_shard_claim
SET owner = NULL, lease_until = $6, last_backoff_ms = $7, attempts = $9, last_error = $8
WHERE kind = $1 AND token = $2 AND region_name = $3 AND shard_scope = $4 AND shard_identifier = $5
