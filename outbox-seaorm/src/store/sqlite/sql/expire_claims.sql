-- Ends the live leases of a holder that was cancelled, now. $1 kind,
-- $2 token, $3 now.
UPDATE outbox_claim_bucket SET token = NULL, owner = NULL, lease_until = $3, version = version + 1
WHERE kind = $1 AND token = $2 AND lease_until > $3
