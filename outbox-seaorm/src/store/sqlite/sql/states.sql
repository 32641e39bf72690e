-- The backoff states of shards. $1 kind, $2 shards as a JSON array of
-- [region, scope, identifier].
SELECT region_name, shard_scope, shard_identifier, attempts, last_backoff_ms, retry_at,
       last_error, failed_at
FROM outbox_shard_state
WHERE kind = $1 AND (region_name, shard_scope, shard_identifier) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]')
    FROM json_each($2))
