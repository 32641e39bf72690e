-- Rows of one shard in id order. $1 scope, $2 identifier, $3 highest id,
-- $4 rows, $5 region.
SELECT id, region_name, shard_scope, shard_identifier, category, object_identifier,
       payload, scheduled_from, scheduled_for, date_added, traceparent, message_id
FROM control_outbox
WHERE region_name = $5 AND shard_scope = $1 AND shard_identifier = $2 AND id <= $3
ORDER BY id
LIMIT $4
