-- The deepest shards first, at a cost bounded by the cap: of the shards
-- holding the oldest $2 + 1 rows (by id; every shard when the table holds no
-- more), the $1 with most rows there, each counted up to $3 + 1 rows along
-- the shard index, with the planner's estimate of its rows (pg_stats on
-- shard_identifier of each partition: its most common values' frequencies,
-- else the rest spread over the other distinct values; summed) for a deeper one.
-- $1 limit, $2 cap, $3 rows counted per shard.
WITH oldest AS (
    SELECT {key} FROM {table} ORDER BY id LIMIT $2 + 1
), shards AS (
    SELECT {key}, count(*) AS seen
    FROM oldest
    GROUP BY {key}
    ORDER BY seen DESC, {key}
    LIMIT $1
), leaves AS MATERIALIZED (
    -- The table, or its partitions, and the rows of each.
    SELECT c.relname, (CASE WHEN pg_stat_get_live_tuples(c.oid) > 0
                            THEN pg_stat_get_live_tuples(c.oid)
                            ELSE GREATEST(c.reltuples, 0)::bigint END)::float8 AS n
    FROM pg_class c
    WHERE c.oid = ANY (ARRAY(SELECT '{table}'::regclass::oid UNION ALL
        SELECT relid::oid FROM pg_partition_tree('{table}') WHERE isleaf))
      AND c.relkind = 'r'
), stats AS (
    SELECT l.n, p.most_common_vals::text::bigint[] AS vals, p.most_common_freqs AS freqs,
           COALESCE((SELECT sum(f) FROM unnest(p.most_common_freqs) f), 0) AS common,
           CASE WHEN p.n_distinct < 0 THEN -p.n_distinct * l.n ELSE p.n_distinct END AS distinct_values
    FROM pg_stats p
    JOIN leaves l ON l.relname = p.tablename
    WHERE p.schemaname = current_schema()
      AND p.tablename = ANY (ARRAY(SELECT relname FROM leaves))
      AND p.attname = 'shard_identifier' AND NOT p.inherited
)
SELECT {region:s or ''::text AS region_name}, s.shard_scope, s.shard_identifier, d.depth, d.oldest_date_added,
       d.next_scheduled_for,
       (SELECT round(sum(CASE
                   WHEN array_position(st.vals, s.shard_identifier) IS NOT NULL
                   THEN st.freqs[array_position(st.vals, s.shard_identifier)] * st.n
                   ELSE (1 - st.common) * st.n
                        / GREATEST(st.distinct_values - COALESCE(array_length(st.vals, 1), 0), 1)
               END))::bigint
        FROM stats st) AS estimate
FROM shards s
CROSS JOIN LATERAL (
    SELECT count(*) AS depth, min(r.date_added) AS oldest_date_added,
           min(r.scheduled_for) AS next_scheduled_for
    FROM (SELECT o.date_added, o.scheduled_for FROM {table} o
          WHERE {key_eq:o=s}
            AND (o.shard_identifier, o.id) > (s.shard_identifier, -9223372036854775807::bigint)
            AND (o.shard_identifier, o.id) <= (s.shard_identifier, 9223372036854775807::bigint)
          ORDER BY {key:o}, o.id LIMIT $3 + 1) r
) d
ORDER BY d.depth DESC, 1, 2, 3
