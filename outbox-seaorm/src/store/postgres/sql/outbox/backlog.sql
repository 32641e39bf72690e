-- What the backlog gauges show of {table}, in one statement whose cost is
-- bounded by the cap, whatever the backlog: the oldest $1 + 1 rows by id
-- (pending rows counted, the oldest's date_added, per scope), the planner's
-- estimate of the table's rows and of each scope's share (pg_stats of each
-- partition, weighted by its rows) for when
-- there are more, the scopes with pending rows (a loose scan of the shard
-- index: one descent per scope), the shard states of the first $1 failing
-- shards by kind (backing off, parked on a payload version, paused,
-- quarantined: see `ShardState::status`), the dead letters counted up to
-- $1 + 1, the table's dead tuples and what holds vacuum's horizon back (as
-- table_health.sql).
-- One row per scope with pending rows, or one row with a null scope.
-- $1 cap, $2 kind, $3 paused_until, $4 quarantined_until.
WITH RECURSIVE scopes AS (
{include:backlog_scopes}
), oldest AS (
    SELECT shard_scope, date_added FROM {table} ORDER BY id LIMIT $1 + 1
), counted AS (
    SELECT count(*) AS n, min(date_added) AS oldest FROM oldest
), leaves AS MATERIALIZED (
    -- The table, or its partitions: rows and dead tuples of each.
    SELECT c.relname, CASE WHEN pg_stat_get_live_tuples(c.oid) > 0
                           THEN pg_stat_get_live_tuples(c.oid)
                           ELSE GREATEST(c.reltuples, 0)::bigint END AS n,
           pg_stat_get_dead_tuples(c.oid) AS dead
    FROM pg_class c
    WHERE c.oid = ANY (ARRAY(SELECT '{table}'::regclass::oid UNION ALL
        SELECT relid::oid FROM pg_partition_tree('{table}') WHERE isleaf))
      AND c.relkind = 'r'
), frequencies AS (
    SELECT m.v::int AS shard_scope,
           sum(m.f * l.n) / NULLIF((SELECT sum(n) FROM leaves), 0) AS frequency
    FROM pg_stats p
    JOIN leaves l ON l.relname = p.tablename
    CROSS JOIN unnest(p.most_common_vals::text::text[], p.most_common_freqs) AS m(v, f)
    WHERE p.schemaname = current_schema()
      AND p.tablename = ANY (ARRAY(SELECT relname FROM leaves))
      AND p.attname = 'shard_scope' AND NOT p.inherited
    GROUP BY m.v
), by_scope AS (
{include:backlog_by_scope}
), states AS (
    SELECT count(*) FILTER (WHERE retry_at < $3 AND NOT parked) AS failing,
           count(*) FILTER (WHERE retry_at < $3 AND parked) AS parked,
           count(*) FILTER (WHERE retry_at >= $3 AND retry_at < $4) AS paused,
           count(*) FILTER (WHERE retry_at >= $4) AS quarantined
    FROM (SELECT retry_at, COALESCE(last_error LIKE 'parked: %', false) AS parked
          FROM outbox_shard_state WHERE kind = $2 LIMIT $1) f
), dead AS (
    SELECT count(*) AS n FROM (SELECT 1 FROM outbox_dead_letter WHERE kind = $2 LIMIT $1 + 1) d
), sessions AS (
    SELECT pid, application_name, usename::text AS holder_user, state, xact_start,
           GREATEST(age(backend_xid), age(backend_xmin)) AS xid_age
    FROM pg_stat_activity
    WHERE datname = current_database() AND backend_type = 'client backend'
      AND (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL)
      AND pid <> pg_backend_pid()
), holders AS (
    SELECT 'session' AS kind, pid, COALESCE(NULLIF(application_name, ''), holder_user) AS name,
           holder_user, state,
           EXTRACT(EPOCH FROM (clock_timestamp() - xact_start))::float8 AS seconds, xid_age
    FROM sessions
    UNION ALL
    SELECT 'prepared transaction', NULL, gid, owner::text, NULL,
           EXTRACT(EPOCH FROM (clock_timestamp() - prepared))::float8, age(transaction)
    FROM pg_prepared_xacts
    WHERE database = current_database()
    UNION ALL
    SELECT 'replication slot', active_pid, slot_name::text, NULL,
           CASE WHEN active THEN 'active' ELSE 'inactive' END, NULL,
           GREATEST(age(xmin), age(catalog_xmin))
    FROM pg_replication_slots
    WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL
), holder AS (
    SELECT * FROM holders ORDER BY xid_age DESC NULLS LAST, seconds DESC NULLS LAST LIMIT 1
)
SELECT c.n AS counted, c.oldest AS oldest_date_added,
       (SELECT sum(n)::bigint FROM leaves) AS estimate,
       st.failing, st.parked, st.paused, st.quarantined, d.n AS dead_letters,
       b.shard_scope, b.counted AS scope_counted, b.oldest AS scope_oldest, b.frequency,
       (SELECT sum(dead)::bigint FROM leaves) AS dead_tuples,
       (SELECT EXTRACT(EPOCH FROM (clock_timestamp() - min(xact_start)))::float8
        FROM sessions) AS oldest_transaction_seconds,
       h.kind AS holder_kind, h.pid AS holder_pid, h.name AS holder_name,
       h.holder_user AS holder_user, h.state AS holder_state,
       h.seconds AS holder_seconds, h.xid_age::bigint AS holder_xid_age
FROM counted c
CROSS JOIN states st
CROSS JOIN dead d
LEFT JOIN holder h ON true
LEFT JOIN by_scope b ON true
ORDER BY b.shard_scope
