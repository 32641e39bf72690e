-- Copies dead letters back, same ids, due at once; the store then deletes
-- them from the dead letters in the same transaction. $1 kind, $2 ids as
-- JSON, $3 the past.
INSERT INTO {table} (id, {key}, category, object_identifier,
                           payload, scheduled_from, scheduled_for, date_added, traceparent, message_id,
                           payload_version)
SELECT id, {key}, category, object_identifier, payload,
       scheduled_from, $3, date_added, traceparent, message_id, payload_version
FROM outbox_dead_letter
WHERE kind = $1 AND id IN (SELECT value FROM json_each($2))
