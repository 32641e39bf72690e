-- backlog.sql's `by_scope` on region_outbox: per scope, its rows among the
-- oldest, the oldest date_added (among them, else the scope's first row in
-- the shard index) and its share in the statistics.
    SELECT s.shard_scope,
           (SELECT count(*) FROM oldest w WHERE w.shard_scope = s.shard_scope) AS counted,
           COALESCE((SELECT min(w.date_added) FROM oldest w WHERE w.shard_scope = s.shard_scope),
                    (SELECT o.date_added FROM region_outbox o
                     WHERE o.shard_scope = s.shard_scope
                     ORDER BY o.shard_scope, o.shard_identifier, o.id LIMIT 1)) AS oldest,
           (SELECT f.frequency FROM frequencies f WHERE f.shard_scope = s.shard_scope)::float8
               AS frequency
    FROM scopes s
