-- backlog.sql's `scopes` on control_outbox: each region's scopes with
-- pending rows, a loose scan of the shard index over its leading columns
-- (region_name, shard_scope): one descent per region and scope.
    (SELECT region_name, shard_scope FROM control_outbox ORDER BY region_name, shard_scope LIMIT 1)
    UNION ALL
    SELECT n.region_name, n.shard_scope
    FROM scopes s
    CROSS JOIN LATERAL (
        SELECT o.region_name, o.shard_scope FROM control_outbox o
        WHERE (o.region_name, o.shard_scope) > (s.region_name, s.shard_scope)
        ORDER BY o.region_name, o.shard_scope LIMIT 1
    ) n
