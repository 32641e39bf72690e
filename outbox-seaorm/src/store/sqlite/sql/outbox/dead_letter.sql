-- Copies rows aside (their scope gave up on them); delete_rows.sql removes
-- them in the same transaction. $1 kind, $2 error, $3 now, $4 ids as JSON.
INSERT INTO outbox_dead_letter
    (kind, id, region_name, shard_scope, shard_identifier, category, object_identifier,
     payload, scheduled_from, scheduled_for, date_added, traceparent, message_id, payload_version,
     error, dead_lettered_at)
SELECT $1, o.id, {region:o or ''}, o.shard_scope, o.shard_identifier, o.category, o.object_identifier,
       o.payload, o.scheduled_from, o.scheduled_for, o.date_added, o.traceparent, o.message_id,
       o.payload_version, $2, $3
FROM {table} o
WHERE o.id IN (SELECT value FROM json_each($4))
