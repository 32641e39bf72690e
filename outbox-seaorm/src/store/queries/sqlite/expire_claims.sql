-- Ends the live claims of a holder that was cancelled, now, as if their lease
-- had run out: other workers may claim the shards at once, and the token can
-- no longer commit (the fence wants `lease_until > now`). Backoff state and
-- failure counts stay. $1 kind, $2 token, $3 now.
UPDATE outbox_shard_claim SET lease_until = $3
WHERE kind = $1 AND token = $2 AND owner IS NOT NULL AND lease_until > $3
