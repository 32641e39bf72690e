-- $1 ids (of shards whose lease the commit's fence kept).
DELETE FROM region_outbox WHERE id = ANY($1::bigint[])
