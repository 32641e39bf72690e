-- Dead tuples of an outbox table (summed over its partitions, with
-- the partition ring); how long the oldest open transaction of
-- this database (another client session's, holding an xid or a snapshot)
-- has run; and what holds vacuum's horizon back the furthest: the oldest
-- of those sessions, of this database's prepared transactions, and of the
-- replication slots (each measured by how many transactions behind the
-- present its horizon is). One row; the holder's columns are null when
-- nothing holds the horizon. $1 table.
WITH sessions AS (
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
SELECT
    (SELECT sum(pg_stat_get_dead_tuples(c.oid))::bigint
     FROM pg_class c
     WHERE c.oid = ANY (ARRAY(SELECT $1::text::regclass::oid UNION ALL
         SELECT relid::oid FROM pg_partition_tree($1::text::regclass) WHERE isleaf))
       AND c.relkind = 'r') AS dead_tuples,
    (SELECT EXTRACT(EPOCH FROM (clock_timestamp() - min(xact_start)))::float8
     FROM sessions) AS oldest_transaction_seconds,
    h.kind AS holder_kind, h.pid AS holder_pid, h.name AS holder_name,
    h.holder_user AS holder_user, h.state AS holder_state,
    h.seconds AS holder_seconds, h.xid_age::bigint AS holder_xid_age
FROM (SELECT 1) AS one
LEFT JOIN holder h ON true
