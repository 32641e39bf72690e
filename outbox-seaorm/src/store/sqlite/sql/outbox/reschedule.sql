-- Moves a shard's rows due before $1 to $1 (only ever later). $1 time,
-- $2 now, $3 scope, $4 identifier, $5 region (control_outbox).
UPDATE {table} SET scheduled_for = $1, scheduled_from = $2
WHERE {key_eq:=$5,$3,$4} AND scheduled_for < $1
