-- The common commit, in one statement: every shard of the claim is done,
-- none failed. Releases the token's live leases of the shards' buckets and
-- deletes the delivered rows of the buckets it still held; rows of a bucket
-- whose lease expired or was taken are left (fencing).
-- The commit does not wait for the WAL flush (synchronous_commit off, for
-- this statement's transaction only): a delete lost in a crash only means a
-- delivery made again, which handlers accept (at least once).
-- $1 kind, $2 token, $3 now, $4 ids, $5 the shards' buckets (through the
-- primary key: scanning every bucket of the kind for the token costs more
-- than the rest of a flush's commit).
WITH relaxed AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
), released AS (
    UPDATE outbox_claim_bucket b
    SET token = NULL, owner = NULL, lease_until = $3, version = b.version + 1
    WHERE b.kind = $1 AND b.bucket = ANY($5::int[]) AND b.token = $2 AND b.lease_until > $3
    RETURNING b.bucket
), deleted AS (
    -- `(… = ANY (SELECT …)) IS TRUE` keeps the test a hashed subplan: as a
    -- semi-join, a generic plan (sqlx prepares statements; PostgreSQL plans
    -- them generically after five runs) loops over `released` for every row.
    DELETE FROM region_outbox o
    WHERE o.id = ANY($4::bigint[])
      AND (((((o.shard_identifier % 1024) + (o.shard_scope % 1024) * 37) % 1024 + 1024) % 1024)::int
          = ANY (SELECT bucket FROM released)) IS TRUE
    RETURNING 1
)
SELECT ARRAY(SELECT bucket FROM released) AS owned,
       (SELECT count(*) FROM deleted) AS deleted,
       (SELECT setting FROM relaxed) AS synchronous_commit
