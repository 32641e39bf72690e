-- The leases, for claim_due_*.sql (included after the window, `win`, and
-- `per_bucket`): the first $5 buckets of the window (`wanted`), leased if
-- free and unchanged since the snapshot, created if missing (`mine`: those
-- this claim holds), and the claim's fencing token.
wanted AS MATERIALIZED (
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
