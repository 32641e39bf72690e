-- Puts dead-lettered rows back, same ids, due at once. $1 kind, $2 ids as a
-- JSON array, $3 the past. (The engine deletes them from the dead letters in
-- the same transaction.)
INSERT INTO {table} (id, {region_column} shard_scope, shard_identifier, category,
                     object_identifier, payload, scheduled_from, scheduled_for, date_added)
SELECT id, {region_value} shard_scope, shard_identifier, category, object_identifier, payload,
       scheduled_from, $3, date_added
FROM outbox_dead_letter
WHERE kind = $1 AND id IN (SELECT value FROM json_each($2))
