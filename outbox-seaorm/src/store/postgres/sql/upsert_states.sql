-- Records the backoff of failed shards. $1 kind, $2 regions, $3 scopes,
-- $4 identifiers, $5 attempts, $6 delays in ms, $7 next attempts, $8 errors,
-- $9 now.
INSERT INTO outbox_shard_state AS s
    (kind, region_name, shard_scope, shard_identifier, attempts, last_backoff_ms, retry_at,
     last_error, failed_at)
SELECT $1, f.region_name, f.shard_scope, f.shard_identifier, f.attempts, f.delay_ms,
       f.retry_at, f.error, $9
FROM unnest($2::text[], $3::int[], $4::bigint[], $5::int[], $6::bigint[], $7::timestamptz[],
            $8::text[])
    AS f(region_name, shard_scope, shard_identifier, attempts, delay_ms, retry_at, error)
ON CONFLICT (kind, region_name, shard_scope, shard_identifier) DO UPDATE
SET attempts = EXCLUDED.attempts, last_backoff_ms = EXCLUDED.last_backoff_ms,
    retry_at = EXCLUDED.retry_at, last_error = EXCLUDED.last_error,
    failed_at = EXCLUDED.failed_at
