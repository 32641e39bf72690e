-- Puts dead-lettered rows back, same ids, due at once. $1 kind, $2 ids, $3 the past.
WITH moved AS (
    DELETE FROM outbox_dead_letter WHERE kind = $1 AND id = ANY($2::bigint[]) RETURNING *
)
INSERT INTO {table} (id, {key}, category, object_identifier,
                           payload, scheduled_from, scheduled_for, date_added, traceparent, message_id,
                           payload_version)
SELECT id, {key}, category, object_identifier, payload,
       scheduled_from, $3, date_added, traceparent, message_id, payload_version
FROM moved
