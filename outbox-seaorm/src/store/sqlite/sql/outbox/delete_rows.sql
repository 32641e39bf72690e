-- $1 ids as a JSON array.
DELETE FROM {table} WHERE id IN (SELECT value FROM json_each($1))
