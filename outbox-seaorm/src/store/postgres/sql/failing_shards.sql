-- Failing shards, next attempt first. $1 kind, $2 limit.
SELECT region_name, shard_scope, shard_identifier, attempts, last_backoff_ms, retry_at,
       last_error, failed_at
FROM outbox_shard_state
WHERE kind = $1
ORDER BY retry_at, region_name, shard_scope, shard_identifier
LIMIT $2
