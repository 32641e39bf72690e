//! The operators' audit log (`outbox_audit`), the same SQL on PostgreSQL and
//! SQLite: a small table, written a few times a day, pruned by age as it is
//! written.

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, Statement};

use outbox_core::audit::{AuditEntry, AuditRecord};
use outbox_core::StoreError;

use super::codec::{get, op};
use crate::time;

const INSERT: &str = "INSERT INTO outbox_audit \
     (at, actor, role, action, target, reason, outcome, detail) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

const PRUNE: &str = "DELETE FROM outbox_audit WHERE at < $1";

const LIST: &str = "SELECT id, at, actor, role, action, target, reason, outcome, detail \
     FROM outbox_audit ORDER BY id DESC LIMIT $1";

/// Records `entry` and removes the records written before `keep_after`.
pub(super) async fn record<C: ConnectionTrait>(
    db: &C,
    entry: &AuditEntry,
    keep_after: DateTime<Utc>,
) -> Result<(), StoreError> {
    let backend = db.get_database_backend();
    let entry = entry.clone().bounded();
    let values = vec![
        time::bind(backend, entry.at),
        entry.actor.into(),
        entry.role.into(),
        entry.action.into(),
        entry.target.into(),
        entry.reason.into(),
        entry.outcome.into(),
        entry.detail.into(),
    ];
    db.execute_raw(Statement::from_sql_and_values(backend, INSERT, values))
        .await
        .map_err(op("record an operator action"))?;
    db.execute_raw(Statement::from_sql_and_values(
        backend,
        PRUNE,
        [time::bind(backend, keep_after)],
    ))
    .await
    .map_err(op("prune the audit log"))?;
    Ok(())
}

/// The newest `limit` records, newest first.
pub(super) async fn list<C: ConnectionTrait>(
    db: &C,
    limit: usize,
) -> Result<Vec<AuditRecord>, StoreError> {
    const OP: &str = "read the audit log";
    let backend = db.get_database_backend();
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = db
        .query_all_raw(Statement::from_sql_and_values(
            backend,
            LIST,
            [limit.into()],
        ))
        .await
        .map_err(op(OP))?;
    rows.iter()
        .map(|row| {
            Ok(AuditRecord {
                id: get(row, "id", OP)?,
                entry: AuditEntry {
                    at: time::get(row, backend, "at")?,
                    actor: get(row, "actor", OP)?,
                    role: get(row, "role", OP)?,
                    action: get(row, "action", OP)?,
                    target: get(row, "target", OP)?,
                    reason: get(row, "reason", OP)?,
                    outcome: get(row, "outcome", OP)?,
                    detail: get(row, "detail", OP)?,
                },
            })
        })
        .collect()
}
