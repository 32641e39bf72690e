-- Renews and row-locks this round's live claims; returns the shards still owned.
-- $1 kind, $2 token, $3 now, $4 new lease end.
UPDATE outbox_shard_claim SET lease_until = $4
WHERE kind = $1 AND token = $2 AND owner IS NOT NULL AND lease_until > $3
RETURNING region_name, shard_scope, shard_identifier
