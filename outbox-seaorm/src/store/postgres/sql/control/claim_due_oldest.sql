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
    FROM control_outbox o
    WHERE o.scheduled_for <= $2 AND o.id <= $3
    ORDER BY o.scheduled_for, o.id
    LIMIT $4 + $4 / 4 + $15
), scanned_buckets AS MATERIALIZED (
    SELECT DISTINCT bucket FROM scanned
), addressed AS MATERIALIZED (
    -- The scanned rows' buckets whose row this process wrote last, read
    -- where it wrote them ($14: each bucket's address, by bucket + 1, see
    -- the store's `addresses.rs`): a TID scan, one read. An address that
    -- no longer holds the version this statement's snapshot sees (another
    -- holder or statement wrote the row since, vacuum moved things) finds
    -- nothing, or another bucket's row, not taken: the key finds the
    -- bucket. One TID scan per address (`OFFSET 0` keeps the lateral read
    -- a subquery the planner cannot turn around), not `ctid = ANY(array)`:
    -- on a table of a few pages the planner reads it whole instead, and
    -- compares every row with every address.
    SELECT b.bucket, b.version, b.leased, b.ctid
    FROM (SELECT s.bucket, ($14::bigint[])[s.bucket + 1] AS at FROM scanned_buckets s) a
    CROSS JOIN LATERAL (
        SELECT b.bucket, b.version, b.lease_until > $2 AS leased, b.ctid
        FROM outbox_claim_bucket b
        WHERE b.ctid = format('(%s,%s)', a.at / 65536, a.at % 65536)::tid
          AND b.kind = $1 AND b.bucket = a.bucket
        OFFSET 0
    ) b
    WHERE a.at > 0
), known AS MATERIALIZED (
    -- The scanned rows' buckets as this statement's snapshot sees them,
    -- read once: whether each is leased, its version (the claim leases it
    -- only unchanged) and address. Those not found at their address are
    -- read through the key, which walks every version the row's updates
    -- left while vacuum's horizon is held back: thousands after minutes
    -- of a long transaction. A bucket this claim leases is read twice:
    -- here, and locked (by address).
    SELECT bucket, version, leased, ctid FROM addressed
    UNION ALL
    SELECT b.bucket, b.version, b.lease_until > $2, b.ctid FROM outbox_claim_bucket b
    WHERE b.kind = $1 AND b.bucket = ANY(ARRAY(
        SELECT bucket FROM scanned_buckets EXCEPT SELECT bucket FROM addressed))
), held AS MATERIALIZED (
    SELECT bucket FROM known WHERE leased
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
), wanted AS MATERIALIZED (
    SELECT bucket FROM per_bucket ORDER BY first LIMIT $5
), snapshot AS MATERIALIZED (
    SELECT k.bucket, k.version, k.ctid FROM known k
    WHERE k.leased IS FALSE AND (k.bucket = ANY (SELECT bucket FROM wanted)) IS TRUE
), locked AS MATERIALIZED (
    -- By the address the snapshot's version was read at. A version changed
    -- since (committed after this statement's snapshot) is locked at its
    -- newest and then fails the version test: left alone. One TID scan
    -- per address, in bucket order (see `addressed`).
    SELECT b.bucket, b.ctid
    FROM (SELECT * FROM snapshot ORDER BY bucket) s
    CROSS JOIN LATERAL (
        SELECT b.bucket, b.ctid FROM outbox_claim_bucket b
        WHERE b.ctid = s.ctid AND b.kind = $1 AND b.bucket = s.bucket
          AND b.version = s.version
        OFFSET 0
        FOR UPDATE SKIP LOCKED
    ) b
), claimed AS (
    -- The versions locked, by their address (a TID scan): no third walk.
    -- A version the snapshot cannot see (renewed since, its lease ended by
    -- this clock) is left alone.
    -- A join on the address: nothing else narrows the table's side, so
    -- the planner reads the locked list once (a TID scan per address, or
    -- one hash of them), never the table once per address.
    UPDATE outbox_claim_bucket b
    SET token = $6, owner = $7, lease_until = $8, version = b.version + 1
    FROM locked l
    WHERE b.ctid = l.ctid
    RETURNING b.bucket, b.ctid::text AS address
), created AS (
    -- A bucket's row is created with the tables, and again here after a
    -- crash emptied the unlogged table.
    INSERT INTO outbox_claim_bucket (kind, bucket, token, owner, lease_until, version)
    SELECT $1, w.bucket, $6, $7, $8, 1 FROM wanted w
    WHERE (w.bucket = ANY (SELECT bucket FROM known)) IS NOT TRUE
    ORDER BY w.bucket
    ON CONFLICT DO NOTHING
    RETURNING bucket, ctid::text AS address
), mine AS MATERIALIZED (
    SELECT bucket, address FROM claimed UNION ALL SELECT bucket, address FROM created
), fence AS MATERIALIZED (
    -- The claim's fencing token (outbox_core::fence), drawn once a bucket
    -- is leased. Creating a bucket row again (a crash emptied the unlogged
    -- table) first moves the sequence a million forward: past any value
    -- handed out before the crash that the sequence had not written to disk.
    SELECT CASE WHEN EXISTS (SELECT 1 FROM created)
                THEN setval('outbox_fence', nextval('outbox_fence') + 1048576)
                ELSE nextval('outbox_fence') END AS value
    WHERE EXISTS (SELECT 1 FROM mine)
), taken AS MATERIALIZED (
    SELECT w.* FROM win w WHERE (w.bucket = ANY (SELECT bucket FROM mine)) IS TRUE
), shards AS MATERIALIZED (
    SELECT w.region_name, w.shard_scope, w.shard_identifier, count(*) AS seen, min(w.id) AS first,
           max(w.id) AS last
    FROM taken w
    GROUP BY w.region_name, w.shard_scope, w.shard_identifier
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
          SELECT region_name, shard_scope, shard_identifier FROM shards)) IS TRUE
)
-- The window rows of the leased shards without a state: as read.
SELECT NULL::bigint AS first, NULL::bigint AS window_rows, NULL::bigint AS scanned_rows,
       w.id, w.region_name AS region_name, w.shard_scope, w.shard_identifier, w.category,
       w.object_identifier, w.payload, w.scheduled_from, w.scheduled_for, w.date_added,
       w.traceparent, w.message_id,
       NULL::int AS attempts, NULL::bigint AS last_backoff_ms, NULL::timestamptz AS retry_at,
       NULL::text AS last_error, NULL::timestamptz AS failed_at,
       NULL::bigint AS fence,
       NULL::bigint AS head, NULL::bigint AS snapshot_xmin, NULL::bigint AS snapshot_xmax,
       NULL::bool AS scanned_all,
       NULL::int AS leased_bucket, NULL::text AS leased_at
FROM taken w
WHERE ((w.region_name, w.shard_scope, w.shard_identifier) = ANY (
      SELECT region_name, shard_scope, shard_identifier FROM states)) IS NOT TRUE
UNION ALL
-- Deep shards without a state, beyond their window rows.
SELECT sh.first, NULL, NULL,
       o.id, sh.region_name, sh.shard_scope, sh.shard_identifier, o.category,
       o.object_identifier, o.payload, o.scheduled_from, o.scheduled_for, o.date_added,
       o.traceparent, o.message_id,
       NULL::int, NULL::bigint, NULL::timestamptz, NULL::text, NULL::timestamptz,
       NULL, NULL, NULL, NULL, NULL,
       NULL::int, NULL::text
FROM shards sh
CROSS JOIN LATERAL (
    SELECT * FROM control_outbox o
    WHERE o.region_name = sh.region_name AND o.shard_scope = sh.shard_scope AND o.shard_identifier = sh.shard_identifier
      AND (o.shard_identifier, o.id) > (sh.shard_identifier, sh.last)
      AND (o.shard_identifier, o.id) <= (sh.shard_identifier, $3)
    -- In the shard index's order (see claim_due_newest.sql).
    ORDER BY o.region_name, o.shard_scope, o.shard_identifier, o.id
    LIMIT GREATEST(0, LEAST($10, (SELECT rows FROM beyond)) - sh.seen)
) o
WHERE sh.seen > 1 AND LEAST($10, (SELECT rows FROM beyond)) > sh.seen
  AND ((sh.region_name, sh.shard_scope, sh.shard_identifier) = ANY (
      SELECT region_name, shard_scope, shard_identifier FROM states)) IS NOT TRUE
UNION ALL
-- Shards with a state: in id order once they may be tried again, as far as
-- a window; until then, their state alone.
SELECT sh.first, NULL, NULL,
       o.id, sh.region_name, sh.shard_scope, sh.shard_identifier, o.category,
       o.object_identifier, o.payload, o.scheduled_from, o.scheduled_for, o.date_added,
       o.traceparent, o.message_id,
       st.attempts, st.last_backoff_ms, st.retry_at, st.last_error, st.failed_at,
       NULL, NULL, NULL, NULL, NULL,
       NULL::int, NULL::text
FROM shards sh
JOIN states st
  ON st.region_name = sh.region_name AND st.shard_scope = sh.shard_scope
 AND st.shard_identifier = sh.shard_identifier
LEFT JOIN LATERAL (
    SELECT * FROM control_outbox o
    WHERE st.retry_at <= $2
      AND o.region_name = sh.region_name AND o.shard_scope = sh.shard_scope AND o.shard_identifier = sh.shard_identifier
      AND (o.shard_identifier, o.id) > (sh.shard_identifier, -9223372036854775807::bigint)
      AND (o.shard_identifier, o.id) <= (sh.shard_identifier, $3)
    -- In the shard index's order (see claim_due_newest.sql).
    ORDER BY o.region_name, o.shard_scope, o.shard_identifier, o.id
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
       NULL, NULL, NULL, NULL, NULL, (SELECT value FROM fence),
       m.head, m.snapshot_xmin, m.snapshot_xmax, m.scanned_all,
       NULL::int, NULL::text
FROM counted c
CROSS JOIN marks m
UNION ALL
-- Where each leased bucket's row is now (the store's `addresses.rs`): the
-- round's commit releases the lease there.
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, mi.bucket, mi.address
FROM mine mi
