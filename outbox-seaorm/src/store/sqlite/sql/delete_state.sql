-- Forgets the backoff of a recovered shard. $1 kind, $2 region, $3 scope,
-- $4 identifier.
DELETE FROM outbox_shard_state
WHERE kind = $1 AND region_name = $2 AND shard_scope = $3 AND shard_identifier = $4
