-- Ends the live claims of a holder that was cancelled, now, as if their lease
-- had run out: other workers may claim the shards at once, and the token can
-- no longer commit (the fence wants `lease_until > now`). Backoff state and
-- failure counts stay. $1 kind, $2 token, $3 now.
-- Locked in key order (see lock_live_claims.sql).
WITH mine AS ({lock_live_claims})
UPDATE outbox_shard_claim c SET lease_until = $3
WHERE c.ctid = ANY(ARRAY(SELECT ctid FROM mine))
