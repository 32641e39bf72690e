-- Ends the backoff (or quarantine) of a shard at $5, keeping its attempts
-- and last delay, so that a failure after it backs off further.
-- $1 kind, $2 region, $3 scope, $4 identifier, $5 now.
UPDATE outbox_shard_state SET retry_at = $5
WHERE kind = $1 AND region_name = $2 AND shard_scope = $3 AND shard_identifier = $4
