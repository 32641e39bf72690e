-- Reads up to $5 rows of each shard, in id order, in one query.
-- $1 regions, $2 scopes, $3 identifiers, $4 highest ids.
SELECT o.id, s.region_name, o.shard_scope, o.shard_identifier, o.category,
       o.object_identifier, o.payload, o.scheduled_from, o.scheduled_for, o.date_added
FROM unnest($1::text[], $2::int[], $3::bigint[], $4::bigint[])
    AS s(region_name, shard_scope, shard_identifier, up_to)
CROSS JOIN LATERAL (
    SELECT * FROM {table} o
    WHERE {region_match} o.shard_scope = s.shard_scope
      AND o.shard_identifier = s.shard_identifier AND o.id <= s.up_to
    ORDER BY o.id
    LIMIT $5
) o
