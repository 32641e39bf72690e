-- Makes the rows of recovered shards due at once again, as new rows are, so
-- that a shard without a state never holds rescheduled rows.
-- $1 now, $2 regions, $3 scopes, $4 identifiers, $5 the past.
UPDATE {table} o SET scheduled_for = $5, scheduled_from = $1
FROM unnest($2::text[], $3::int[], $4::bigint[]) AS s(region_name, shard_scope, shard_identifier)
WHERE {key_eq:o=s}
  AND o.scheduled_for > $5
