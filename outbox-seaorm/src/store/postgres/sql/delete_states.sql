-- Forgets the backoff of recovered shards. $1 kind, $2 regions, $3 scopes,
-- $4 identifiers.
DELETE FROM outbox_shard_state s
USING unnest($2::text[], $3::int[], $4::bigint[]) AS r(region_name, shard_scope, shard_identifier)
WHERE s.kind = $1 AND s.region_name = r.region_name AND s.shard_scope = r.shard_scope
  AND s.shard_identifier = r.shard_identifier
