-- Pending rows, counted up to $1 + 1 along the primary key (an index scan
-- that stops there, whatever the backlog), and the planner's estimate of the
-- table's rows (the statistics' live tuples, else pg_class.reltuples, summed
-- over its partitions when it has them) for
-- when there are more. $1 cap.
SELECT (SELECT count(*) FROM (SELECT 1 FROM {table} ORDER BY id LIMIT $1 + 1) w) AS n,
       (SELECT sum(CASE WHEN pg_stat_get_live_tuples(c.oid) > 0
                        THEN pg_stat_get_live_tuples(c.oid)
                        ELSE GREATEST(c.reltuples, 0)::bigint END)::bigint
    FROM pg_class c
    WHERE c.oid = ANY (ARRAY(SELECT '{table}'::regclass::oid UNION ALL
        SELECT relid::oid FROM pg_partition_tree('{table}') WHERE isleaf))
      AND c.relkind = 'r') AS estimate
