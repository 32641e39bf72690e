-- The deepest shards first, at a cost bounded by the cap: of the shards
-- holding the oldest $2 + 1 rows (by id; every shard when the table holds no
-- more), the $1 with most rows there, each counted up to $2 + 1 rows along
-- the shard index. $1 limit, $2 cap.
WITH oldest AS (
    SELECT shard_scope, shard_identifier FROM region_outbox ORDER BY id LIMIT $2 + 1
), shards AS (
    SELECT shard_scope, shard_identifier, count(*) AS seen
    FROM oldest
    GROUP BY shard_scope, shard_identifier
    ORDER BY seen DESC, shard_scope, shard_identifier
    LIMIT $1
)
SELECT ''::text AS region_name, s.shard_scope, s.shard_identifier, d.depth, d.oldest_date_added,
       d.next_scheduled_for
FROM shards s
CROSS JOIN LATERAL (
    SELECT count(*) AS depth, min(r.date_added) AS oldest_date_added,
           min(r.scheduled_for) AS next_scheduled_for
    FROM (SELECT o.date_added, o.scheduled_for FROM region_outbox o
          WHERE o.shard_scope = s.shard_scope AND o.shard_identifier = s.shard_identifier
          ORDER BY o.id LIMIT $2 + 1) r
) d
ORDER BY d.depth DESC, 1, 2, 3
