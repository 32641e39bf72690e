-- The oldest due rows of free buckets, in index order, with their bucket.
-- $1 now, $2 highest id, $3 kind, $4 rows.
SELECT o.id, '' AS region_name, o.shard_scope, o.shard_identifier, o.category,
       o.object_identifier, o.payload, o.scheduled_from, o.scheduled_for, o.date_added, o.traceparent, o.message_id,
       (((o.shard_identifier % 1024) + (o.shard_scope % 1024) * 37) % 1024 + 1024) % 1024 AS bucket
FROM region_outbox o
WHERE o.scheduled_for <= $1 AND o.id <= $2
  AND (((o.shard_identifier % 1024) + (o.shard_scope % 1024) * 37) % 1024 + 1024) % 1024 NOT IN (
      SELECT bucket FROM outbox_claim_bucket WHERE kind = $3 AND lease_until > $1)
ORDER BY o.scheduled_for, o.id
LIMIT $4
