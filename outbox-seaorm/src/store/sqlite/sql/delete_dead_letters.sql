-- $1 kind, $2 ids as JSON.
DELETE FROM outbox_dead_letter WHERE kind = $1 AND id IN (SELECT value FROM json_each($2))
