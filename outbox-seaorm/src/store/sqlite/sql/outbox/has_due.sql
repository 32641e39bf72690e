-- Whether a row is due in a free bucket of a shard that does not back off.
-- $1 kind, $2 now.
SELECT 1 AS due FROM {table} o
WHERE o.scheduled_for <= $2
  AND (((o.shard_identifier % 1024) + (o.shard_scope % 1024) * 37) % 1024 + 1024) % 1024 NOT IN (
      SELECT bucket FROM outbox_claim_bucket WHERE kind = $1 AND lease_until > $2)
  AND NOT EXISTS (
      SELECT 1 FROM outbox_shard_state s
      WHERE s.kind = $1 AND s.region_name = {region:o or ''} AND s.shard_scope = o.shard_scope
        AND s.shard_identifier = o.shard_identifier AND s.retry_at > $2)
LIMIT 1
