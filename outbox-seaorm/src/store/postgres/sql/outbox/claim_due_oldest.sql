-- Leases free buckets that hold due rows and returns the rows of their
-- shards, in one statement: a background round's claim from the oldest end
-- of the due rows (claim_due_newest.sql takes the newest end).
-- $1 kind, $2 now, $3 highest id, $4 window rows, $5 buckets at most,
-- $6 token, $7 owner, $8 lease end, $9 rows read beyond the window, $10
-- rows of one shard at most, $11 and $12 the watermark (unused: this
-- claim scans from the very start; claim_due_above.sql from the
-- watermark), $13 the `scheduled_for` of rows due since they were
-- written, $14 where this process last wrote each bucket's row (0: not
-- known; the store's `addresses.rs`), $15 the rows this process's rounds hold.
--
-- The window: the first $4 due rows of free buckets, oldest first, whole
-- rows. The scan is bounded (`ClaimRequest::scan_limit`): a quarter more than
-- the window and the rows this process's rounds in flight hold ($15),
-- whatever is held elsewhere: a deep shard being delivered, its
-- bucket held, costs a claim at most that much. When the
-- window came out less than half full, the rows scanned are counted (a
-- claim that found mostly held rows says so); otherwise `scanned_rows` is
-- the window's.
--
-- The rows: from this end, a shard without a backoff state has its window
-- rows as the prefix of its pending rows (all its rows are due since 2016,
-- in id order: a backoff reschedules them with the state), so they are
-- returned as read. When the window was full, a shard with more than one
-- row in it is read further by range (the shard index), as far as its
-- share of $4 + $9 rows (the window and beyond), at most $10, so that its
-- coalescing groups are delivered once by this claim rather than split
-- with the next. A shard with a state is read by range once it may be
-- tried again (its rescheduled rows sort after newer due ones). Rows come
-- back grouped by part, not by shard; the caller groups them.
--
-- Buckets are leased only if unchanged since this statement's snapshot,
-- which the reads use (see claim_due_newest.sql), through their key and
-- hashed subplans, never joins a generic plan could turn into nested loops
-- over CTEs.
WITH scanned AS MATERIALIZED (
    SELECT o.*, ((((o.shard_identifier % 1024) + (o.shard_scope % 1024) * 37) % 1024 + 1024) % 1024)::int AS bucket
    FROM {table} o
    WHERE o.scheduled_for <= $2 AND o.id <= $3
    ORDER BY o.scheduled_for, o.id
    LIMIT $4 + $4 / 4 + $15
), {include:claim_buckets}
), marks AS MATERIALIZED (
    -- The watermark's candidate and this statement's snapshot (see
    -- claim_due_above.sql), and the rows scanned. The first row read that
    -- is due since written is the lowest id of them: `scanned` is read
    -- back in scan order, (scheduled_for, id).
    SELECT (SELECT id FROM scanned WHERE scheduled_for = $13 LIMIT 1) AS head,
           pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS snapshot_xmin,
           pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS snapshot_xmax,
           c.rows < $4 + $4 / 4 + $15 AS scanned_all, c.rows AS scanned_rows
    FROM (SELECT count(*) AS rows FROM scanned) c
), win AS MATERIALIZED (
    -- In scan order (a CTE is read back as it was written).
    SELECT s.* FROM scanned s
    WHERE (s.bucket = ANY (SELECT bucket FROM held)) IS NOT TRUE
    LIMIT $4
), per_bucket AS MATERIALIZED (
    -- The window by bucket, in one pass: its rows, and which buckets come
    -- first.
    SELECT bucket, min(id) AS first, count(*) AS rows FROM win GROUP BY bucket
), counted AS MATERIALIZED (
    SELECT w.rows AS window_rows,
           CASE WHEN w.rows * 2 < $4 THEN (SELECT scanned_rows FROM marks)
           ELSE w.rows END AS scanned_rows
    FROM (SELECT COALESCE(sum(rows), 0)::bigint AS rows FROM per_bucket) w
), {include:claim_leases}
), taken AS MATERIALIZED (
    SELECT w.* FROM win w WHERE (w.bucket = ANY (SELECT bucket FROM mine)) IS TRUE
), shards AS MATERIALIZED (
    SELECT {key:w}, count(*) AS seen, min(w.id) AS first,
           max(w.id) AS last
    FROM taken w
    GROUP BY {key:w}
), beyond AS MATERIALIZED (
    -- Rows each deep shard may read: its share of the window and beyond,
    -- when the window was full.
    SELECT CASE WHEN (SELECT window_rows FROM counted) >= $4
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
-- The window rows of the leased shards without a state: as read.
SELECT NULL::bigint AS first, NULL::bigint AS window_rows, NULL::bigint AS scanned_rows,
       w.id, {region:w or NULL::text} AS region_name, w.shard_scope, w.shard_identifier, w.category,
       w.object_identifier, w.payload, w.scheduled_from, w.scheduled_for, w.date_added,
       w.traceparent, w.message_id, w.payload_version,
       NULL::int AS attempts, NULL::bigint AS last_backoff_ms, NULL::timestamptz AS retry_at,
       NULL::text AS last_error, NULL::timestamptz AS failed_at,
       NULL::bigint AS fence,
       NULL::bigint AS head, NULL::bigint AS snapshot_xmin, NULL::bigint AS snapshot_xmax,
       NULL::bool AS scanned_all,
       NULL::int AS leased_bucket, NULL::text AS leased_at
FROM taken w
WHERE (({key:w}) = ANY (
      SELECT {key} FROM states)) IS NOT TRUE
UNION ALL
-- Deep shards without a state, beyond their window rows.
SELECT sh.first, NULL, NULL,
       o.id, {region:sh or NULL}, sh.shard_scope, sh.shard_identifier, o.category,
       o.object_identifier, o.payload, o.scheduled_from, o.scheduled_for, o.date_added,
       o.traceparent, o.message_id, o.payload_version,
       NULL::int, NULL::bigint, NULL::timestamptz, NULL::text, NULL::timestamptz,
       NULL, NULL, NULL, NULL, NULL,
       NULL::int, NULL::text
FROM shards sh
CROSS JOIN LATERAL (
    SELECT * FROM {table} o
    WHERE {key_eq:o=sh}
      AND (o.shard_identifier, o.id) > (sh.shard_identifier, sh.last)
      AND (o.shard_identifier, o.id) <= (sh.shard_identifier, $3)
    -- In the shard index's order (see claim_due_newest.sql).
    ORDER BY {key:o}, o.id
    LIMIT GREATEST(0, LEAST($10, (SELECT rows FROM beyond)) - sh.seen)
) o
WHERE sh.seen > 1 AND LEAST($10, (SELECT rows FROM beyond)) > sh.seen
  AND (({key:sh}) = ANY (
      SELECT {key} FROM states)) IS NOT TRUE
UNION ALL
-- Shards with a state: in id order once they may be tried again, as far as
-- a window; until then, their state alone.
SELECT sh.first, NULL, NULL,
       o.id, {region:sh or NULL}, sh.shard_scope, sh.shard_identifier, o.category,
       o.object_identifier, o.payload, o.scheduled_from, o.scheduled_for, o.date_added,
       o.traceparent, o.message_id, o.payload_version,
       st.attempts, st.last_backoff_ms, st.retry_at, st.last_error, st.failed_at,
       NULL, NULL, NULL, NULL, NULL,
       NULL::int, NULL::text
FROM shards sh
JOIN states st
  ON st.region_name = {region:sh or ''} AND st.shard_scope = sh.shard_scope
 AND st.shard_identifier = sh.shard_identifier
LEFT JOIN LATERAL (
    SELECT * FROM {table} o
    WHERE st.retry_at <= $2
      AND {key_eq:o=sh}
      AND (o.shard_identifier, o.id) > (sh.shard_identifier, -9223372036854775807::bigint)
      AND (o.shard_identifier, o.id) <= (sh.shard_identifier, $3)
    -- In the shard index's order (see claim_due_newest.sql).
    ORDER BY {key:o}, o.id
    LIMIT LEAST($4, $10)
) o ON true
UNION ALL
-- The claim's own figures, once: the counts (for the planner), the
-- watermark's marks, and the fencing token of every shard it leased (none:
-- NULL). The rows above leave these columns NULL: a constant repeated on
-- each of thousands of rows cost the server a send function per value and
-- the store a decode.
SELECT NULL, c.window_rows, c.scanned_rows,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, (SELECT value FROM fence),
       m.head, m.snapshot_xmin, m.snapshot_xmax, m.scanned_all,
       NULL::int, NULL::text
FROM counted c
CROSS JOIN marks m
UNION ALL
-- Where each leased bucket's row is now (the store's `addresses.rs`): the
-- round's commit releases the lease there.
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, mi.bucket, mi.address
FROM mine mi
