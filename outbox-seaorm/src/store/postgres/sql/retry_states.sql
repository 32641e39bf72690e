-- Ends the backoff (or quarantine) of shards at $5, keeping their attempts
-- and last delay, so that a failure after it backs off further.
-- $1 kind, $2 regions, $3 scopes, $4 identifiers, $5 now.
UPDATE outbox_shard_state s SET retry_at = $5
FROM unnest($2::text[], $3::int[], $4::bigint[]) AS r(region_name, shard_scope, shard_identifier)
WHERE s.kind = $1 AND s.region_name = r.region_name AND s.shard_scope = r.shard_scope
  AND s.shard_identifier = r.shard_identifier
