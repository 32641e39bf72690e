//! The workers' history samples (`outbox_history`), the same SQL on
//! PostgreSQL and SQLite: one multi-row insert per sample round, old
//! samples pruned in the same statement (PostgreSQL) or the next (SQLite).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, Statement, Value};

use outbox_core::history::Sample;
use outbox_core::{OutboxKind, StoreError};

use super::codec::{get, op};
use crate::time;

const COLUMNS: &str = "at, kind, scope, owner, depth, oldest_age_ms, delivered, failed, \
     dead_lettered, dead_letters";

const LIST: &str = "SELECT at, kind, scope, owner, depth, oldest_age_ms, delivered, failed, \
     dead_lettered, dead_letters FROM outbox_history WHERE kind = $1 AND at >= $2 \
     ORDER BY at, scope, owner";

fn number(value: u64) -> Value {
    i64::try_from(value).unwrap_or(i64::MAX).into()
}

/// `INSERT … VALUES (…), (…) ON CONFLICT DO NOTHING` of `samples`, its
/// placeholders numbered from `first`, and their values.
fn insert(backend: DbBackend, samples: &[Sample], first: usize) -> (String, Vec<Value>) {
    let mut values = Vec::with_capacity(samples.len() * 10);
    let mut rows = Vec::with_capacity(samples.len());
    for sample in samples {
        let at = first + values.len();
        let places: Vec<String> = (at..at + 10).map(|n| format!("${n}")).collect();
        rows.push(format!("({})", places.join(", ")));
        values.extend([
            time::bind(backend, sample.at),
            sample.kind.as_i16().into(),
            sample.scope.clone().unwrap_or_default().into(),
            sample.owner.clone().into(),
            number(sample.depth),
            sample
                .oldest_age
                .map(|age| i64::try_from(age.as_millis()).unwrap_or(i64::MAX))
                .into(),
            number(sample.delivered),
            number(sample.failed),
            number(sample.dead_lettered),
            number(sample.dead_letters),
        ]);
    }
    let sql = format!(
        "INSERT INTO outbox_history ({COLUMNS}) VALUES {} ON CONFLICT DO NOTHING",
        rows.join(", ")
    );
    (sql, values)
}

/// Records `samples` and removes those taken before `keep_after`: one
/// statement on PostgreSQL, two on SQLite (no `DELETE` in a `WITH`).
pub(super) async fn record<C: ConnectionTrait>(
    db: &C,
    samples: &[Sample],
    keep_after: DateTime<Utc>,
) -> Result<(), StoreError> {
    const OP: &str = "record the outbox history";
    let backend = db.get_database_backend();
    let prune = "DELETE FROM outbox_history WHERE at < $1";
    let keep_after = time::bind(backend, keep_after);
    if samples.is_empty() {
        db.execute_raw(Statement::from_sql_and_values(backend, prune, [keep_after]))
            .await
            .map_err(op(OP))?;
        return Ok(());
    }
    if backend == DbBackend::Postgres {
        let (insert, mut values) = insert(backend, samples, 2);
        values.insert(0, keep_after);
        let sql = format!("WITH pruned AS ({prune}) {insert}");
        db.execute_raw(Statement::from_sql_and_values(backend, sql, values))
            .await
            .map_err(op(OP))?;
    } else {
        db.execute_raw(Statement::from_sql_and_values(backend, prune, [keep_after]))
            .await
            .map_err(op(OP))?;
        let (insert, values) = insert(backend, samples, 1);
        db.execute_raw(Statement::from_sql_and_values(backend, insert, values))
            .await
            .map_err(op(OP))?;
    }
    Ok(())
}

/// The samples of `kind` since `since`, oldest first.
pub(super) async fn list<C: ConnectionTrait>(
    db: &C,
    kind: OutboxKind,
    since: DateTime<Utc>,
) -> Result<Vec<Sample>, StoreError> {
    const OP: &str = "read the outbox history";
    let backend = db.get_database_backend();
    let rows = db
        .query_all_raw(Statement::from_sql_and_values(
            backend,
            LIST,
            [kind.as_i16().into(), time::bind(backend, since)],
        ))
        .await
        .map_err(op(OP))?;
    rows.iter()
        .map(|row| {
            let unsigned = |name: &str| -> Result<u64, StoreError> {
                Ok(u64::try_from(get::<i64>(row, name, OP)?).unwrap_or(0))
            };
            let scope: String = get(row, "scope", OP)?;
            Ok(Sample {
                at: time::get(row, backend, "at")?,
                kind,
                scope: (!scope.is_empty()).then_some(scope),
                owner: get(row, "owner", OP)?,
                depth: unsigned("depth")?,
                oldest_age: get::<Option<i64>>(row, "oldest_age_ms", OP)?
                    .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
                delivered: unsigned("delivered")?,
                failed: unsigned("failed")?,
                dead_lettered: unsigned("dead_lettered")?,
                dead_letters: unsigned("dead_letters")?,
            })
        })
        .collect()
}
