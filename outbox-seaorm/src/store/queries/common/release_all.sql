-- Drops every claim of a round. $1 kind, $2 token.
DELETE FROM outbox_shard_claim WHERE kind = $1 AND token = $2
