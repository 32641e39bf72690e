-- Pending rows, counted up to $1 + 1 along the primary key (an index scan
-- that stops there, whatever the backlog), and the planner's estimate of the
-- table's rows (the statistics' live tuples, else pg_class.reltuples) for
-- when there are more. $1 cap.
SELECT (SELECT count(*) FROM (SELECT 1 FROM control_outbox ORDER BY id LIMIT $1 + 1) w) AS n,
       (SELECT CASE WHEN s.n_live_tup > 0 THEN s.n_live_tup
                ELSE GREATEST(c.reltuples, 0)::bigint END
    FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
    WHERE c.oid = 'control_outbox'::regclass) AS estimate
