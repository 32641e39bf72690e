-- The common commit, in one statement: every shard of the claim is done,
-- none failed. Releases the token's live leases of the shards' buckets and
-- deletes the delivered rows of the buckets it still held; rows of a bucket
-- whose lease expired or was taken are left (fencing).
-- The commit does not wait for the WAL flush (synchronous_commit off, for
-- this statement's transaction only): a delete lost in a crash only means a
-- delivery made again, which handlers accept (at least once).
-- $1 kind, $2 token, $3 now, $4 ids, $5 the shards' buckets (through the
-- primary key: scanning every bucket of the kind for the token costs more
-- than the rest of a flush's commit), $6 where the claim left the
-- buckets' rows (0: not known; the store's `addresses.rs`).
-- Returns the buckets released and where their rows are now.
WITH relaxed AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
), by_address AS (
    -- Where the claim left them: a TID scan, one read, however many
    -- versions a held-back vacuum horizon keeps (the claims' `addressed`).
    -- A version updated since is released at its newest only if that still
    -- carries the token and a live lease, as through the key.
    UPDATE outbox_claim_bucket b
    SET token = NULL, owner = NULL, lease_until = $3, version = b.version + 1
    WHERE b.ctid = ANY(ARRAY(
            SELECT format('(%s,%s)', a / 65536, a % 65536)::tid FROM unnest($6::bigint[]) a
            WHERE a > 0))
      AND b.kind = $1 AND (b.bucket = ANY($5::int[])) IS TRUE AND b.token = $2
      AND b.lease_until > $3
    RETURNING b.bucket, b.ctid::text AS address
), by_key AS (
    -- The others, through the key.
    UPDATE outbox_claim_bucket b
    SET token = NULL, owner = NULL, lease_until = $3, version = b.version + 1
    WHERE b.kind = $1
      AND b.bucket = ANY(ARRAY(SELECT unnest($5::int[]) EXCEPT SELECT bucket FROM by_address))
      AND b.token = $2 AND b.lease_until > $3
    RETURNING b.bucket, b.ctid::text AS address
), released AS MATERIALIZED (
    SELECT bucket, address FROM by_address UNION ALL SELECT bucket, address FROM by_key
), deleted AS (
    -- `(… = ANY (SELECT …)) IS TRUE` keeps the test a hashed subplan: as a
    -- semi-join, a generic plan (sqlx prepares statements; PostgreSQL plans
    -- them generically after five runs) loops over `released` for every row.
    DELETE FROM {table} o
    WHERE o.id = ANY($4::bigint[])
      AND (((((o.shard_identifier % 1024) + (o.shard_scope % 1024) * 37) % 1024 + 1024) % 1024)::int
          = ANY (SELECT bucket FROM released)) IS TRUE
    RETURNING 1
)
SELECT ARRAY(SELECT bucket FROM released) AS owned,
       ARRAY(SELECT address FROM released) AS addresses,
       (SELECT count(*) FROM deleted) AS deleted,
       (SELECT setting FROM relaxed) AS synchronous_commit
