-- Rows of one shard in id order. $1 scope, $2 identifier, $3 highest id,
-- $4 rows, $5 region (control_outbox).
SELECT id, {region or '' AS region_name}, shard_scope, shard_identifier, category, object_identifier,
       payload, scheduled_from, scheduled_for, date_added, traceparent, message_id, payload_version
FROM {table}
WHERE {key_eq:=$5,$1,$2} AND id <= $3
ORDER BY id
LIMIT $4
