-- Leases buckets (free ones: the caller checked, inside the same write
-- transaction). $1 kind, $2 token, $3 owner, $4 lease end, $5 buckets as JSON.
INSERT INTO outbox_claim_bucket (kind, bucket, token, owner, lease_until, version)
SELECT $1, value, $2, $3, $4, 1 FROM json_each($5) WHERE true
ON CONFLICT (kind, bucket) DO UPDATE
SET token = excluded.token, owner = excluded.owner, lease_until = excluded.lease_until,
    version = outbox_claim_bucket.version + 1
