-- Extends the live leases of a token. $1 kind, $2 token, $3 now, $4 new end.
UPDATE outbox_claim_bucket SET lease_until = $4
WHERE kind = $1 AND token = $2 AND lease_until > $3
