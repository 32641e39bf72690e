//! Runtime controls (`outbox_control`), the same SQL on PostgreSQL and
//! SQLite: a small table every worker reads whole about once a second.

use sea_orm::{ConnectionTrait, QueryResult, Statement, Value};

use outbox_core::{ControlAction, ControlTarget, OutboxKind, RuntimeControl, ShardKey, StoreError};

use super::codec::{get, op};
use crate::time;

const READ: &str = "SELECT kind, region_name, shard_scope, whole_scope, shard_identifier, action, \
     reason, created_at FROM outbox_control \
     ORDER BY kind, region_name, shard_scope, whole_scope DESC, shard_identifier";

const SET: &str = "INSERT INTO outbox_control \
     (kind, region_name, shard_scope, whole_scope, shard_identifier, action, reason, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
     ON CONFLICT (kind, region_name, shard_scope, whole_scope, shard_identifier) \
     DO UPDATE SET action = excluded.action, reason = excluded.reason, \
     created_at = excluded.created_at";

const CLEAR: &str = "DELETE FROM outbox_control WHERE kind = $1 AND region_name = $2 \
     AND shard_scope = $3 AND whole_scope = $4 AND shard_identifier = $5";

/// The key columns of a target: kind, region, scope, whole scope,
/// identifier.
fn key(target: &ControlTarget) -> Vec<Value> {
    let (kind, region, scope, whole, identifier) = match target {
        ControlTarget::Shard(shard) => (
            shard.kind(),
            shard.region_name().unwrap_or_default().to_owned(),
            shard.scope(),
            false,
            shard.identifier(),
        ),
        ControlTarget::Scope {
            kind,
            region,
            scope,
        } => (*kind, region.clone().unwrap_or_default(), *scope, true, 0),
    };
    vec![
        kind.as_i16().into(),
        region.into(),
        scope.into(),
        whole.into(),
        identifier.into(),
    ]
}

fn control(
    row: &QueryResult,
    backend: sea_orm::DbBackend,
) -> Result<Option<RuntimeControl>, StoreError> {
    const OP: &str = "read a runtime control";
    let kind = match get::<i16>(row, "kind", OP)? {
        0 => OutboxKind::Region,
        1 => OutboxKind::Control,
        _ => return Ok(None),
    };
    let Some(action) = ControlAction::from_i16(get(row, "action", OP)?) else {
        // Written by a newer version: not ours to apply.
        return Ok(None);
    };
    let region: String = get(row, "region_name", OP)?;
    let scope: i32 = get(row, "shard_scope", OP)?;
    let target = if get::<bool>(row, "whole_scope", OP)? {
        ControlTarget::Scope {
            kind,
            region: (kind == OutboxKind::Control).then_some(region),
            scope,
        }
    } else {
        ControlTarget::Shard(ShardKey::from_raw(
            kind,
            scope,
            get(row, "shard_identifier", OP)?,
            Some(region),
        ))
    };
    Ok(Some(RuntimeControl {
        target,
        action,
        reason: get(row, "reason", OP)?,
        created_at: time::get(row, backend, "created_at")?,
    }))
}

/// Every control.
pub(super) async fn read<C: ConnectionTrait>(db: &C) -> Result<Vec<RuntimeControl>, StoreError> {
    let backend = db.get_database_backend();
    let rows = db
        .query_all_raw(Statement::from_string(backend, READ))
        .await
        .map_err(op("read runtime controls"))?;
    let mut controls = Vec::with_capacity(rows.len());
    for row in &rows {
        controls.extend(control(row, backend)?);
    }
    Ok(controls)
}

/// Sets `control`, replacing the one of its target.
pub(super) async fn set<C: ConnectionTrait>(
    db: &C,
    control: &RuntimeControl,
) -> Result<(), StoreError> {
    let backend = db.get_database_backend();
    let mut values = key(&control.target);
    values.push(control.action.as_i16().into());
    values.push(control.reason.clone().into());
    values.push(time::bind(backend, control.created_at));
    db.execute_raw(Statement::from_sql_and_values(backend, SET, values))
        .await
        .map_err(op("set a runtime control"))?;
    Ok(())
}

/// Removes the control of `target`; whether there was one.
pub(super) async fn clear<C: ConnectionTrait>(
    db: &C,
    target: &ControlTarget,
) -> Result<bool, StoreError> {
    let backend = db.get_database_backend();
    let done = db
        .execute_raw(Statement::from_sql_and_values(backend, CLEAR, key(target)))
        .await
        .map_err(op("clear a runtime control"))?;
    Ok(done.rows_affected() > 0)
}
