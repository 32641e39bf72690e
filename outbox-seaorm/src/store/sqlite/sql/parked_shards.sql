-- Shards parked on a payload version their receiver does not know, next
-- attempt first: as `ShardState::is_parked` says, a stored error that
-- starts with `parked: ` (compared as it is: SQLite's LIKE ignores case)
-- and a real next attempt (before the pause's `retry_at`, and so not
-- quarantined either). $1 kind, $2 limit, $3 paused_until.
SELECT region_name, shard_scope, shard_identifier, attempts, last_backoff_ms, retry_at,
       last_error, failed_at
FROM outbox_shard_state
WHERE kind = $1 AND retry_at < $3 AND substr(last_error, 1, 8) = 'parked: '
ORDER BY retry_at, region_name, shard_scope, shard_identifier
LIMIT $2
