-- Drops one claim of a round. $1 kind, $2 token, $3 region, $4 scope, $5 identifier.
DELETE FROM outbox_shard_claim
WHERE kind = $1 AND token = $2 AND region_name = $3 AND shard_scope = $4 AND shard_identifier = $5
