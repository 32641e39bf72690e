-- $1 kind, $2 now.
SELECT 1 AS due FROM {table} o
WHERE o.scheduled_for <= $2 AND NOT EXISTS (
    SELECT 1 FROM outbox_shard_claim c
    WHERE c.kind = $1 AND c.region_name = {region_select}
      AND c.shard_scope = o.shard_scope AND c.shard_identifier = o.shard_identifier
      AND c.lease_until > $2
)
LIMIT 1
