-- Claims up to $4 due shards nobody holds, oldest first, in one statement
-- (PostgreSQL and SQLite; SQLite runs it under its single writer).
-- $1 now, $2 highest id considered, $3 kind, $4 limit, $5 token, $6 owner, $7 lease end,
-- $8 rows scanned for candidate shards.
-- Two workers racing for a shard: the second waits on the first's insert, then
-- its ON CONFLICT ... WHERE sees a live lease and skips the shard.
-- Never read the claimed shards' rows in this same statement: its snapshot
-- predates the claim, so it can still see rows that another worker delivered
-- and deleted just before the claim was granted (they would be delivered
-- again, out of order). The engine reads them in a separate statement.
WITH candidates AS (
    -- The oldest due rows of shards nobody holds, in index order: a bounded
    -- scan ($8 rows), never an aggregate over the whole backlog.
    SELECT {region_select} AS region_name, o.shard_scope, o.shard_identifier,
           o.scheduled_for, o.id
    FROM {table} o
    WHERE o.scheduled_for <= $1 AND o.id <= $2
      AND NOT EXISTS (
        SELECT 1 FROM outbox_shard_claim c
        WHERE c.kind = $3 AND c.region_name = {region_select}
          AND c.shard_scope = o.shard_scope AND c.shard_identifier = o.shard_identifier
          AND c.lease_until > $1
      )
    ORDER BY o.scheduled_for, o.id
    LIMIT $8
), free AS (
    SELECT region_name, shard_scope, shard_identifier,
           min(scheduled_for) AS first_due, min(id) AS first_id
    FROM candidates
    GROUP BY region_name, shard_scope, shard_identifier
    ORDER BY first_due, first_id
    LIMIT $4
)
INSERT INTO outbox_shard_claim AS c
    (kind, region_name, shard_scope, shard_identifier, token, owner, lease_until, attempts)
SELECT $3, f.region_name, f.shard_scope, f.shard_identifier, $5, $6, $7, 0
FROM free f
WHERE true -- SQLite: keeps ON CONFLICT from parsing as a join constraint
ORDER BY f.region_name, f.shard_scope, f.shard_identifier
ON CONFLICT (kind, region_name, shard_scope, shard_identifier) DO UPDATE
    SET token = EXCLUDED.token, owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until
    WHERE c.lease_until <= $1
RETURNING region_name, shard_scope, shard_identifier, last_backoff_ms, attempts
