-- Leases free buckets that hold due rows and returns the rows of their
-- shards, in one statement: a background round's claim from the oldest end
-- of the due rows *above the watermark* ($11, $12), so that the scan does
-- not step over the index entries of rows delivered long ago (while a
-- long transaction pins vacuum's horizon, those entries cannot be removed,
-- and claim_due_oldest.sql, which scans from the very start, reads every
-- one of them each time).
-- $1 kind, $2 now, $3 highest id, $4 window rows, $5 buckets at most,
-- $6 token, $7 owner, $8 lease end, $9 rows read beyond the window, $10
-- rows of one shard at most, $11 and $12 the watermark: rows before
-- ($11 scheduled_for, $12 id) are not scanned, $13 the `scheduled_for` of
-- rows due since they were written, $14 where this process last wrote
-- each bucket's row (0: not known; the store's `addresses.rs`), $15 the rows
-- this process's rounds hold (`ClaimRequest::held_rows`).
--
-- The watermark only limits which shards a claim finds, never what it
-- reads of them: each leased shard is read by range from its oldest
-- pending row (the shard index), as claim_due_newest.sql does, so a
-- pending row below the watermark (a late commit, a shard made due again
-- by a retry or a replay) is delivered in order with its shard, and found
-- by the next claim from the very start (claim_due_oldest.sql) if its
-- shard has nothing above it. How the store moves the watermark:
-- `store::postgres::watermark`.
--
-- `head` (every result row): the lowest id scanned among rows due since
-- they were written, the watermark's next candidate; `snapshot_xmin` and
-- `snapshot_xmax`: this statement's snapshot, which tells the store when
-- every transaction that could still write below a candidate has ended.
--
-- The window, the rows, the leases and the plans: as claim_due_newest.sql,
-- from the other end.
WITH scanned AS MATERIALIZED (
    SELECT o.id, o.scheduled_for, {key:o},
           ((((o.shard_identifier % 1024) + (o.shard_scope % 1024) * 37) % 1024 + 1024) % 1024)::int AS bucket
    FROM {table} o
    WHERE o.scheduled_for <= $2 AND o.id <= $3 AND (o.scheduled_for, o.id) >= ($11, $12)
    ORDER BY o.scheduled_for, o.id
    LIMIT $4 + $4 / 4 + $15
), marks AS MATERIALIZED (
    -- The watermark's next candidate (see the header) and the snapshot's
    -- horizon, which tells the caller when a candidate holds.
    -- The first such row read is the lowest id of them: `scanned` is read
    -- back in scan order, (scheduled_for, id).
    SELECT (SELECT id FROM scanned WHERE scheduled_for = $13 LIMIT 1) AS head,
           pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS snapshot_xmin,
           pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS snapshot_xmax,
           (SELECT count(*) FROM scanned) < $4 + $4 / 4 + $15 AS scanned_all
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
    SELECT bucket, min(id) AS first, count(*) AS rows FROM win GROUP BY bucket
), window_rows AS MATERIALIZED (
    SELECT COALESCE(sum(rows), 0)::bigint AS rows FROM per_bucket
), {include:claim_leases}
), shards AS MATERIALIZED (
    SELECT {key:w}, count(*) AS seen, min(w.id) AS first
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
    -- In the shard index's order (see claim_due_newest.sql).
    ORDER BY {key:o}, o.id
    LIMIT LEAST($10, CASE WHEN st.attempts IS NOT NULL THEN $4
                          WHEN sh.seen > 1 THEN GREATEST(sh.seen, (SELECT rows FROM beyond))
                          ELSE sh.seen END)
) o ON true
UNION ALL
-- The claim's own figures, once: the counts (for the planner), the
-- watermark's marks and the fencing token of every shard it leased (none:
-- NULL). The rows above leave these columns NULL (see
-- claim_due_oldest.sql).
SELECT NULL, (SELECT rows FROM window_rows), (SELECT count(*) FROM scanned),
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, (SELECT value FROM fence),
       m.head, m.snapshot_xmin, m.snapshot_xmax, m.scanned_all, NULL::int, NULL::text
FROM marks m
UNION ALL
-- Where each leased bucket's row is now (the store's `addresses.rs`): the
-- round's commit releases the lease there.
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, mi.bucket, mi.address
FROM mine mi
