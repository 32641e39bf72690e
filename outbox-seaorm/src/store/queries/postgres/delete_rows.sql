-- $1 ids (one bounded chunk).
DELETE FROM {table} WHERE id = ANY($1::bigint[])
