-- The buckets of the scanned rows, for claim_due_*.sql (included after the
-- `scanned` CTE: the window's candidate rows, each with its `bucket`): where
-- this process last wrote each one's row, how each is seen from this
-- statement's snapshot (`known`), and which are leased (`held`).
scanned_buckets AS MATERIALIZED (
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
