-- Claims up to $4 due shards nobody holds, oldest first, in one statement.
-- $1 now, $2 highest id considered, $3 kind, $4 limit, $5 token, $6 owner, $7 lease end.
-- Two workers racing for a shard: the second waits on the first's insert, then
-- its ON CONFLICT ... WHERE sees a live lease and skips the shard.
WITH due AS (
    SELECT {region_select} AS region_name, o.shard_scope, o.shard_identifier,
           min(o.scheduled_for) AS first_due, min(o.id) AS first_id
    FROM {table} o
    WHERE o.scheduled_for <= $1 AND o.id <= $2
    GROUP BY {region_group} o.shard_scope, o.shard_identifier
), free AS (
    SELECT d.region_name, d.shard_scope, d.shard_identifier
    FROM due d
    WHERE NOT EXISTS (
        SELECT 1 FROM outbox_shard_claim c
        WHERE c.kind = $3 AND c.region_name = d.region_name
          AND c.shard_scope = d.shard_scope AND c.shard_identifier = d.shard_identifier
          AND c.lease_until > $1
    )
    ORDER BY d.first_due, d.first_id
    LIMIT $4
)
INSERT INTO outbox_shard_claim AS c
    (kind, region_name, shard_scope, shard_identifier, token, owner, lease_until, attempts)
SELECT $3, f.region_name, f.shard_scope, f.shard_identifier, $5, $6, $7, 0
FROM free f
ORDER BY f.region_name, f.shard_scope, f.shard_identifier
ON CONFLICT (kind, region_name, shard_scope, shard_identifier) DO UPDATE
    SET token = EXCLUDED.token, owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until
    WHERE c.lease_until <= $1
RETURNING c.region_name, c.shard_scope, c.shard_identifier, c.last_backoff_ms, c.attempts
