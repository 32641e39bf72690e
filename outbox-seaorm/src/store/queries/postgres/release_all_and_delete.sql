-- The common round, in one statement: every claim of the round ends, so drop
-- the live ones and delete the delivered rows of exactly those shards. A claim
-- that expired or was taken is not returned and its rows are not deleted.
-- The commit does not wait for the WAL flush (synchronous_commit off, for
-- this statement's transaction only): a delete lost in a crash only means a
-- delivery made again, which handlers already accept (at least once).
-- $1 kind, $2 token, $3 now, $4 ids.
WITH relaxed AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
), mine AS ({lock_live_claims}), owned AS (
    -- Locked in key order (see lock_live_claims.sql), then deleted by ctid.
    DELETE FROM outbox_shard_claim c
    WHERE c.ctid = ANY(ARRAY(SELECT ctid FROM mine))
    RETURNING c.region_name, c.shard_scope, c.shard_identifier
), deleted AS (
    DELETE FROM {table} o
    WHERE o.id = ANY($4::bigint[])
      AND EXISTS (
        SELECT 1 FROM owned w
        WHERE w.region_name = {region_select}
          AND w.shard_scope = o.shard_scope AND w.shard_identifier = o.shard_identifier
      )
    RETURNING 1
)
SELECT w.region_name, w.shard_scope, w.shard_identifier,
       (SELECT count(*) FROM deleted) AS deleted,
       (SELECT setting FROM relaxed) AS synchronous_commit
FROM owned w
