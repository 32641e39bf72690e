-- Claims one shard unless a live worker holds it; a backing-off shard is taken.
-- $1 kind, $2 region, $3 scope, $4 identifier, $5 token, $6 owner, $7 lease end, $8 now.
INSERT INTO outbox_shard_claim AS c
    (kind, region_name, shard_scope, shard_identifier, token, owner, lease_until, attempts)
VALUES ($1, $2, $3, $4, $5, $6, $7, 0)
ON CONFLICT (kind, region_name, shard_scope, shard_identifier) DO UPDATE
    SET token = EXCLUDED.token, owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until
    WHERE c.lease_until <= $8 OR c.owner IS NULL
RETURNING last_backoff_ms, attempts
