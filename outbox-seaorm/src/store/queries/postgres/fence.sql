-- Renews and row-locks this round's live claims; returns the shards still owned.
-- $1 kind, $2 token, $3 now, $4 new lease end.
-- Rows are locked in key order, the order in which claim_due takes them (and a
-- claim locks every row it conflicts with, even one it leaves alone): locked
-- in storage order instead, a fence and a racing claim can deadlock.
WITH mine AS (
    SELECT kind, region_name, shard_scope, shard_identifier
    FROM outbox_shard_claim
    WHERE kind = $1 AND token = $2 AND owner IS NOT NULL AND lease_until > $3
    ORDER BY region_name, shard_scope, shard_identifier
    FOR UPDATE
)
UPDATE outbox_shard_claim c SET lease_until = $4
FROM mine m
WHERE c.kind = m.kind AND c.region_name = m.region_name
  AND c.shard_scope = m.shard_scope AND c.shard_identifier = m.shard_identifier
RETURNING c.region_name, c.shard_scope, c.shard_identifier
