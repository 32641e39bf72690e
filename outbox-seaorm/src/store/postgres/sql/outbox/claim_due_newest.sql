-- Leases free buckets that hold due rows and returns the rows of their
-- shards, in one statement: a background round's claim from the newest end
-- of the due rows (claim_due_oldest.sql takes the oldest end).
-- $1 kind, $2 now, $3 highest id, $4 window rows, $5 buckets at most,
-- $6 token, $7 owner, $8 lease end, $9 rows read beyond the window, $10
-- rows of one shard at most, $11 and $12 the watermark: rows before
-- ($11 scheduled_for, $12 id) are not scanned (see claim_due_above.sql),
-- $13 the `scheduled_for` of rows due since they were written, $14 where
-- this process last wrote each bucket's row (0: not known; the store's
-- `addresses.rs`).
--
-- The window: the first $4 due rows of free buckets in the due index, from
-- its newest end (the engine looks at both ends, see outbox_core's
-- drain planner). The scan is bounded, at a quarter more than the window
-- (`ClaimRequest::scan_limit`),
-- whatever is held: a deep shard being delivered, its bucket held, costs a
-- claim at most that much, and a claim that found only held rows says so
-- (`window_rows` 0, `scanned_rows` > 0) instead of walking its whole backlog.
--
-- The rows: each leased shard is read by range from its oldest pending row
-- (the shard index: from this end, the window holds a shard's newest rows,
-- and it may have older ones), as many as it had in the window; when the window was
-- full, a shard with more than one row in it is read further, as far as
-- its share of $4 + $9 rows (the window and beyond), so that its groups are
-- delivered once by this claim rather than split with the next; no shard
-- is read further than $10 (a deeper one is delivered in batches). A shard
-- without a backoff state has all its rows due (a backoff reschedules them
-- with the state), so the range is its prefix of pending rows in id order.
--
-- The rows come from this statement's snapshot, taken before the leases. A
-- bucket released after the snapshot may have lost rows the snapshot still
-- shows (its holder delivered and deleted them), so a bucket is leased only
-- if its row is unchanged since the snapshot (`version` grows with every
-- claim and release; FOR UPDATE rechecks the condition on the newest
-- version).
--
-- Written to plan well generically (sqlx prepares statements, and PostgreSQL
-- plans a prepared statement generically after five runs, with no idea of
-- how many rows a CTE holds): tables are reached through their indexes with
-- `= ANY(ARRAY(…))`, and set membership is tested with
-- `(… = ANY (SELECT …)) IS TRUE`, a hashed subplan, never a join a generic
-- plan could turn into nested loops over CTEs.
WITH scanned AS MATERIALIZED (
    SELECT o.id, {key:o},
           ((((o.shard_identifier % 1024) + (o.shard_scope % 1024) * 37) % 1024 + 1024) % 1024)::int AS bucket
    FROM {table} o
    WHERE o.scheduled_for <= $2 AND o.id <= $3 AND (o.scheduled_for, o.id) >= ($11, $12)
    ORDER BY o.scheduled_for DESC, o.id DESC
    LIMIT $4 + $4 / 4
), {include:claim_buckets}
), win AS MATERIALIZED (
    SELECT s.* FROM scanned s
    WHERE (s.bucket = ANY (SELECT bucket FROM held)) IS NOT TRUE
    -- In scan order (a CTE is read back as it was written); which rows make
    -- the window changes only which shards go first.
    LIMIT $4
), per_bucket AS MATERIALIZED (
    -- The window by bucket, in one pass: its rows, and which buckets come
    -- first.
    SELECT bucket, -max(id) AS first, count(*) AS rows FROM win GROUP BY bucket
), window_rows AS MATERIALIZED (
    SELECT COALESCE(sum(rows), 0)::bigint AS rows FROM per_bucket
), {include:claim_leases}
), shards AS MATERIALIZED (
    SELECT {key:w}, count(*) AS seen, -max(w.id) AS first
    FROM win w
    WHERE (w.bucket = ANY (SELECT bucket FROM mine)) IS TRUE
    GROUP BY {key:w}
), beyond AS MATERIALIZED (
    -- Rows each deep shard may read: its share of the window and beyond,
    -- when the window was full.
    SELECT CASE WHEN (SELECT rows FROM window_rows) >= $4
                THEN ($4 + $9) / GREATEST(1, (SELECT count(*) FROM shards WHERE seen > 1))
                ELSE 0 END AS rows
), states AS MATERIALIZED (
    SELECT s.region_name, s.shard_scope, s.shard_identifier, s.attempts, s.last_backoff_ms,
           s.retry_at, s.last_error, s.failed_at
    FROM outbox_shard_state s
    WHERE s.kind = $1
      AND ((s.region_name, s.shard_scope, s.shard_identifier) = ANY (
          SELECT {region or ''::text}, shard_scope, shard_identifier FROM shards)) IS TRUE
)
SELECT sh.first, NULL::bigint AS window_rows, NULL::bigint AS scanned_rows,
       o.id, {region:sh or NULL::text} AS region_name, sh.shard_scope, sh.shard_identifier, o.category,
       o.object_identifier, o.payload, o.scheduled_from, o.scheduled_for, o.date_added,
       o.traceparent, o.message_id, o.payload_version,
       st.attempts, st.last_backoff_ms, st.retry_at, st.last_error, st.failed_at,
       NULL::bigint AS fence,
       NULL::bigint AS head, NULL::bigint AS snapshot_xmin, NULL::bigint AS snapshot_xmax,
       NULL::bool AS scanned_all,
       NULL::int AS leased_bucket, NULL::text AS leased_at
FROM shards sh
LEFT JOIN states st
  ON st.region_name = {region:sh or ''} AND st.shard_scope = sh.shard_scope
 AND st.shard_identifier = sh.shard_identifier
LEFT JOIN LATERAL (
    -- In id order: a shard that backs off, once it may be tried again, as
    -- far as a window (its rescheduled rows sort after newer due ones);
    -- any other shard, its rows in the window and, when deep, beyond.
    SELECT * FROM {table} o
    WHERE {key_eq:o=sh}
      AND (o.shard_identifier, o.id) > (sh.shard_identifier, -9223372036854775807::bigint)
      AND (o.shard_identifier, o.id) <= (sh.shard_identifier, $3)
      AND (st.retry_at IS NULL OR st.retry_at <= $2)
    -- The shard's rows from the shard index, in its order, and from no
    -- other index: equalities on the shard's columns (which keep the
    -- planner's estimate of a shard's rows right), the identifier and id as
    -- row comparisons at both ends, and no condition on id alone. Each
    -- other form fails one way:
    -- - all equalities and `id <=`: the order reduces to id, which the id
    --   index has too, and `id <=` is a condition it can use, so a generic
    --   plan made on a ring partition whose statistics say it is small
    --   reads the shard through the id index, filtered by shard, a walk
    --   over every row delivered since the horizon was held back;
    -- - the whole key as row comparisons at both ends: a row comparison
    --   ends a B-tree scan only by its first column (PostgreSQL marks only
    --   that one required), the scope, so each shard's read goes on to the
    --   end of its scope;
    -- - the scope's equality and row comparisons on (identifier, id) alone:
    --   right scans, but the planner estimates a large share of the table
    --   per shard, and a claim on a deep backlog spends far more CPU for
    --   the same pages.
    -- The id index offers no condition here, only a read of all of it,
    -- priced above the shard's equalities unless a partition's statistics
    -- say it holds one shard. Tested: outbox-seaorm/tests/shard_reads.rs.
    ORDER BY {key:o}, o.id
    LIMIT LEAST($10, CASE WHEN st.attempts IS NOT NULL THEN $4
                          WHEN sh.seen > 1 THEN GREATEST(sh.seen, (SELECT rows FROM beyond))
                          ELSE sh.seen END)
) o ON true
UNION ALL
-- The claim's own figures, once: the counts (for the planner) and the
-- fencing token of every shard it leased (none: NULL). The rows above
-- leave these columns NULL (see claim_due_oldest.sql).
SELECT NULL, (SELECT rows FROM window_rows), (SELECT count(*) FROM scanned),
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, (SELECT value FROM fence),
       NULL, NULL, NULL, NULL, NULL::int, NULL::text
UNION ALL
-- Where each leased bucket's row is now (the store's `addresses.rs`): the
-- round's commit releases the lease there.
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, mi.bucket, mi.address
FROM mine mi
