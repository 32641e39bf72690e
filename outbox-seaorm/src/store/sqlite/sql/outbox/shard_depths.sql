-- The deepest shards first. $1 limit.
SELECT {region:o or '' AS region_name}, o.shard_scope, o.shard_identifier, count(*) AS depth,
       min(o.date_added) AS oldest_date_added, min(o.scheduled_for) AS next_scheduled_for
FROM {table} o
GROUP BY {key:o}
ORDER BY depth DESC, 1, 2, 3
LIMIT $1
