-- Renews and row-locks this round's live claims; returns the shards still owned.
-- $1 kind, $2 token, $3 now, $4 new lease end.
-- Locked in key order, like every statement that locks claim rows (see
-- lock_live_claims.sql).
WITH mine AS ({lock_live_claims})
UPDATE outbox_shard_claim c SET lease_until = $4
WHERE c.ctid = ANY(ARRAY(SELECT ctid FROM mine))
RETURNING c.region_name, c.shard_scope, c.shard_identifier
