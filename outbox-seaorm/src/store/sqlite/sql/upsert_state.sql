-- Records the backoff of a failed shard. $1 kind, $2 region, $3 scope,
-- $4 identifier, $5 attempts, $6 delay in ms, $7 next attempt, $8 error, $9 now.
INSERT INTO outbox_shard_state
    (kind, region_name, shard_scope, shard_identifier, attempts, last_backoff_ms, retry_at,
     last_error, failed_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (kind, region_name, shard_scope, shard_identifier) DO UPDATE
SET attempts = excluded.attempts, last_backoff_ms = excluded.last_backoff_ms,
    retry_at = excluded.retry_at, last_error = excluded.last_error,
    failed_at = excluded.failed_at
