-- Pending rows, counted up to $1 + 1 along the primary key (an index scan
-- that stops there, whatever the backlog), and the planner's estimate of the
-- table's rows (the statistics' live tuples, else pg_class.reltuples, summed
-- over its partitions when it has them) for
-- when there are more. $1 cap.
SELECT (SELECT count(*) FROM (SELECT 1 FROM control_outbox ORDER BY id LIMIT $1 + 1) w) AS n,
       (SELECT sum(CASE WHEN s.n_live_tup > 0 THEN s.n_live_tup
                    ELSE GREATEST(c.reltuples, 0)::bigint END)::bigint
    FROM (SELECT 'control_outbox'::regclass AS relid UNION ALL
          SELECT relid FROM pg_partition_tree('control_outbox') WHERE isleaf) t
    JOIN pg_class c ON c.oid = t.relid AND c.relkind = 'r'
    LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid) AS estimate
