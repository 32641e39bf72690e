-- Renews and row-locks this round's live claims; returns the shards still owned.
-- $1 kind, $2 token, $3 now, $4 new lease end.
-- Rows are locked in key order, the order in which claim_due takes them (and a
-- claim locks every row it conflicts with, even one it leaves alone): locked
-- in storage order instead, a fence and a racing claim can deadlock.
WITH mine AS (
    SELECT ctid
    FROM outbox_shard_claim
    WHERE kind = $1 AND token = $2 AND owner IS NOT NULL AND lease_until > $3
    ORDER BY region_name, shard_scope, shard_identifier
    FOR UPDATE
)
-- By ctid: the rows just locked, found without another index probe.
UPDATE outbox_shard_claim c SET lease_until = $4
WHERE c.ctid = ANY(ARRAY(SELECT ctid FROM mine))
RETURNING c.region_name, c.shard_scope, c.shard_identifier
