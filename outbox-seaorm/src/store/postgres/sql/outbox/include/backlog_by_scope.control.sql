-- backlog.sql's `by_scope` on control_outbox: per scope, its rows among
-- the oldest, the oldest date_added (among them, else the oldest of the
-- first rows of the scope in each region, read from the shard index, which
-- leads with the region) and its share in the statistics.
    SELECT s.shard_scope,
           (SELECT count(*) FROM oldest w WHERE w.shard_scope = s.shard_scope) AS counted,
           COALESCE((SELECT min(w.date_added) FROM oldest w WHERE w.shard_scope = s.shard_scope),
                    (SELECT min(o.date_added) FROM scopes r
                     CROSS JOIN LATERAL (
                         SELECT o.date_added FROM control_outbox o
                         WHERE o.region_name = r.region_name AND o.shard_scope = r.shard_scope
                         ORDER BY o.shard_identifier, o.id LIMIT 1
                     ) o
                     WHERE r.shard_scope = s.shard_scope)) AS oldest,
           (SELECT f.frequency FROM frequencies f WHERE f.shard_scope = s.shard_scope)::float8
               AS frequency
    FROM (SELECT DISTINCT shard_scope FROM scopes) s
