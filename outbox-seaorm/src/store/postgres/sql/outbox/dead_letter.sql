-- Moves rows aside (their scope gave up on them). $1 kind, $2 error, $3 now, $4 ids.
WITH moved AS (
    DELETE FROM {table} o WHERE o.id = ANY($4::bigint[]) RETURNING o.*
)
INSERT INTO outbox_dead_letter
    (kind, id, region_name, shard_scope, shard_identifier, category, object_identifier,
     payload, scheduled_from, scheduled_for, date_added, traceparent, message_id, payload_version,
     error, dead_lettered_at)
SELECT $1, m.id, {region:m or ''}, m.shard_scope, m.shard_identifier, m.category, m.object_identifier,
       m.payload, m.scheduled_from, m.scheduled_for, m.date_added, m.traceparent, m.message_id,
       m.payload_version, $2, $3
FROM moved m
