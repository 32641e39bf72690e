-- Reads up to $4 rows of one shard, in id order.
-- $1 scope, $2 identifier, $3 highest id, $4 limit, [$5 region].
SELECT id, category, object_identifier, payload, scheduled_from, scheduled_for, date_added
FROM {table}
WHERE shard_scope = $1 AND shard_identifier = $2 AND id <= $3 {region_eq_5}
ORDER BY id
LIMIT $4
