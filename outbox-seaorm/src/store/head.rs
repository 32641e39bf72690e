//! A shard's head message, read for an operator (the same SQL on
//! PostgreSQL and SQLite): the rows the dashboard shows for a blocked
//! shard, and that `set_aside` moves to the dead letters.

use sea_orm::{ConnectionTrait, Statement};

use outbox_core::message::StoredRow;
use outbox_core::{OutboxKind, ShardKey, StoreError};

use super::codec::{self, op};

const REGION: &str = "SELECT id, '' AS region_name, shard_scope, shard_identifier, category, \
     object_identifier, payload, scheduled_from, scheduled_for, date_added, traceparent, \
     message_id, payload_version FROM region_outbox \
     WHERE shard_scope = $1 AND shard_identifier = $2 ORDER BY id LIMIT $3";

const CONTROL: &str = "SELECT id, region_name, shard_scope, shard_identifier, category, \
     object_identifier, payload, scheduled_from, scheduled_for, date_added, traceparent, \
     message_id, payload_version FROM control_outbox \
     WHERE shard_scope = $1 AND shard_identifier = $2 AND region_name = $4 ORDER BY id LIMIT $3";

/// The oldest `limit` pending rows of `shard`, in id order.
pub(super) async fn read<C: ConnectionTrait>(
    db: &C,
    shard: &ShardKey,
    limit: usize,
) -> Result<Vec<StoredRow>, StoreError> {
    let backend = db.get_database_backend();
    let mut values = vec![
        shard.scope().into(),
        shard.identifier().into(),
        codec::limit(limit).into(),
    ];
    let sql = match shard.kind() {
        OutboxKind::Region => REGION,
        OutboxKind::Control => {
            values.push(codec::region(shard).into());
            CONTROL
        }
    };
    let rows = db
        .query_all_raw(Statement::from_sql_and_values(backend, sql, values))
        .await
        .map_err(op("read a shard's head"))?;
    let mut head = Vec::with_capacity(rows.len());
    for row in &rows {
        head.extend(codec::stored_row(row, backend, shard)?);
    }
    Ok(head)
}
