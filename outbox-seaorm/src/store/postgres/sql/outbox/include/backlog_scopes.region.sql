-- backlog.sql's `scopes` on region_outbox: the scopes with pending rows,
-- a loose scan of the shard index (its leading column is the scope): one
-- descent per scope.
    (SELECT shard_scope FROM region_outbox ORDER BY shard_scope LIMIT 1)
    UNION ALL
    SELECT n.shard_scope
    FROM scopes s
    CROSS JOIN LATERAL (
        SELECT o.shard_scope FROM region_outbox o
        WHERE o.shard_scope > s.shard_scope
        ORDER BY o.shard_scope LIMIT 1
    ) n
