-- The first due rows from the oldest end (the newest-first form reverses
-- the order where marked), with their bucket and whether a live lease holds
-- it: a bounded scan, whatever is held (see the PostgreSQL claim_due.sql).
-- $1 now, $2 highest id, $3 kind, $4 rows scanned at most.
SELECT o.id, {region:o or '' AS region_name}, o.shard_scope, o.shard_identifier, o.category,
       o.object_identifier, o.payload, o.scheduled_from, o.scheduled_for, o.date_added, o.traceparent, o.message_id,
       o.payload_version,
       (((o.shard_identifier % 1024) + (o.shard_scope % 1024) * 37) % 1024 + 1024) % 1024 AS bucket,
       (((o.shard_identifier % 1024) + (o.shard_scope % 1024) * 37) % 1024 + 1024) % 1024 IN (
           SELECT bucket FROM outbox_claim_bucket WHERE kind = $3 AND lease_until > $1) AS held
FROM {table} o
WHERE o.scheduled_for <= $1 AND o.id <= $2
ORDER BY o.scheduled_for /*dir*/, o.id /*dir*/
LIMIT $4
