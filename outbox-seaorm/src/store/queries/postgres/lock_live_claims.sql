-- The body of a `mine` CTE, shared by fence.sql, release_all_and_delete.sql and
-- expire_claims.sql ({lock_live_claims}): the live claims of a token, row-locked
-- in key order. $1 kind, $2 token, $3 now.
-- Key order is the order in which claim_due takes rows (its INSERT is sorted by
-- key, and ON CONFLICT locks every row it meets, even one its WHERE then
-- leaves alone). Locked in storage order instead, a commit and a racing claim
-- can deadlock. The caller then touches exactly these rows, by ctid.
SELECT ctid
FROM outbox_shard_claim
WHERE kind = $1 AND token = $2 AND owner IS NOT NULL AND lease_until > $3
ORDER BY region_name, shard_scope, shard_identifier
FOR UPDATE
