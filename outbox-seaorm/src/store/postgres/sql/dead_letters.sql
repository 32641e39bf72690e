-- Dead letters, oldest first. $1 kind, $2 limit.
SELECT id, region_name, shard_scope, shard_identifier, category, object_identifier, payload,
       scheduled_from, scheduled_for, date_added, traceparent, message_id, payload_version, error,
       dead_lettered_at
FROM outbox_dead_letter
WHERE kind = $1
ORDER BY dead_lettered_at, id
LIMIT $2
