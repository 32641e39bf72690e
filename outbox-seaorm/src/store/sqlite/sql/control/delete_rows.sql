-- $1 ids as a JSON array.
DELETE FROM control_outbox WHERE id IN (SELECT value FROM json_each($1))
