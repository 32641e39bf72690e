-- Reschedules every row of a shard. $1 scope, $2 identifier, $3 retry at, $4 now, [$5 region].
UPDATE {table} SET scheduled_for = $3, scheduled_from = $4
WHERE shard_scope = $1 AND shard_identifier = $2 {region_eq_5}
