-- $1 ids (of shards whose lease the commit's fence kept).
DELETE FROM {table} WHERE id = ANY($1::bigint[])
