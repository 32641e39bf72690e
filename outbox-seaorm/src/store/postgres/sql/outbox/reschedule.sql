-- Moves the rows of shards to later times: a backoff (every row), or new rows
-- of a shard that backs off. Only ever later. $1 now, $2 regions, $3 scopes,
-- $4 identifiers, $5 times.
UPDATE {table} o SET scheduled_for = s.at, scheduled_from = $1
FROM unnest($2::text[], $3::int[], $4::bigint[], $5::timestamptz[])
    AS s(region_name, shard_scope, shard_identifier, at)
WHERE {key_eq:o=s}
  AND o.scheduled_for < s.at
