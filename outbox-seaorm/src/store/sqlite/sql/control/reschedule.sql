-- Moves a shard's rows due before $1 to $1 (only ever later). $1 time,
-- $2 now, $3 scope, $4 identifier, $5 region.
UPDATE control_outbox SET scheduled_for = $1, scheduled_from = $2
WHERE region_name = $5 AND shard_scope = $3 AND shard_identifier = $4 AND scheduled_for < $1
