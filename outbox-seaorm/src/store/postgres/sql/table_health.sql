-- Dead tuples of an outbox table, and how long the oldest open transaction
-- of this database (another session's, holding an xid or a snapshot) has
-- run (client sessions: not autovacuum's own). $1 table.
SELECT
    (SELECT n_dead_tup FROM pg_stat_user_tables
     WHERE relname = $1 AND schemaname = current_schema()) AS dead_tuples,
    (SELECT EXTRACT(EPOCH FROM (clock_timestamp() - min(xact_start)))::float8
     FROM pg_stat_activity
     WHERE datname = current_database() AND backend_type = 'client backend'
       AND (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL)
       AND pid <> pg_backend_pid()) AS oldest_transaction_seconds
