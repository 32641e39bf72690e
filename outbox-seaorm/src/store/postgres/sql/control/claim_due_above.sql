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
    SELECT o.id, o.scheduled_for, o.region_name, o.shard_scope, o.shard_identifier,
           ((((o.shard_identifier % 1024) + (o.shard_scope % 1024) * 37) % 1024 + 1024) % 1024)::int AS bucket
    FROM control_outbox o
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
), shards AS MATERIALIZED (
    SELECT w.region_name, w.shard_scope, w.shard_identifier, count(*) AS seen, min(w.id) AS first
    FROM win w
    WHERE (w.bucket = ANY (SELECT bucket FROM mine)) IS TRUE
    GROUP BY w.region_name, w.shard_scope, w.shard_identifier
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
          SELECT region_name, shard_scope, shard_identifier FROM shards)) IS TRUE
)
SELECT sh.first, NULL::bigint AS window_rows, NULL::bigint AS scanned_rows,
       o.id, sh.region_name AS region_name, sh.shard_scope, sh.shard_identifier, o.category,
       o.object_identifier, o.payload, o.scheduled_from, o.scheduled_for, o.date_added,
       o.traceparent, o.message_id,
       st.attempts, st.last_backoff_ms, st.retry_at, st.last_error, st.failed_at,
       NULL::bigint AS fence,
       NULL::bigint AS head, NULL::bigint AS snapshot_xmin, NULL::bigint AS snapshot_xmax,
       NULL::bool AS scanned_all,
       NULL::int AS leased_bucket, NULL::text AS leased_at
FROM shards sh
LEFT JOIN states st
  ON st.region_name = sh.region_name AND st.shard_scope = sh.shard_scope
 AND st.shard_identifier = sh.shard_identifier
LEFT JOIN LATERAL (
    -- In id order: a shard that backs off, once it may be tried again, as
    -- far as a window (its rescheduled rows sort after newer due ones);
    -- any other shard, its rows in the window and, when deep, beyond.
    SELECT * FROM control_outbox o
    WHERE o.region_name = sh.region_name AND o.shard_scope = sh.shard_scope AND o.shard_identifier = sh.shard_identifier
      AND (o.shard_identifier, o.id) > (sh.shard_identifier, -9223372036854775807::bigint)
      AND (o.shard_identifier, o.id) <= (sh.shard_identifier, $3)
      AND (st.retry_at IS NULL OR st.retry_at <= $2)
    -- In the shard index's order (see claim_due_newest.sql).
    ORDER BY o.region_name, o.shard_scope, o.shard_identifier, o.id
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
       NULL, NULL, NULL, NULL, NULL, (SELECT value FROM fence),
       m.head, m.snapshot_xmin, m.snapshot_xmax, m.scanned_all, NULL::int, NULL::text
FROM marks m
UNION ALL
-- Where each leased bucket's row is now (the store's `addresses.rs`): the
-- round's commit releases the lease there.
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, mi.bucket, mi.address
FROM mine mi
