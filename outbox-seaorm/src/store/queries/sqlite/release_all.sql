-- Drops every live claim of a round. $1 kind, $2 token.
-- Not its backoffs: a shard that failed in an earlier round of this claim keeps
-- the token with `owner` NULL, and its backoff must outlive the round.
DELETE FROM outbox_shard_claim WHERE kind = $1 AND token = $2 AND owner IS NOT NULL
