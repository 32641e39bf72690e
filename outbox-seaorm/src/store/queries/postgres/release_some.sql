-- Drops the listed claims of a round. $1 kind, $2 token, $3 regions, $4 scopes, $5 identifiers.
DELETE FROM outbox_shard_claim c
USING unnest($3::text[], $4::int[], $5::bigint[]) AS s(region_name, shard_scope, shard_identifier)
WHERE c.kind = $1 AND c.token = $2 AND c.region_name = s.region_name
  AND c.shard_scope = s.shard_scope AND c.shard_identifier = s.shard_identifier
