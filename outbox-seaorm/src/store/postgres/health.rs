//! What `table_health.sql` answers: an outbox table's dead tuples, the
//! oldest open transaction, and what holds vacuum's horizon back.

use std::time::Duration;

use outbox_core::store::{HorizonHolder, HorizonHolderKind, TableHealth};
use outbox_core::StoreError;
use sea_orm::QueryResult;

use crate::store::codec::get;

/// Reads the statement's one row.
pub(super) fn decode(row: &QueryResult, op: &'static str) -> Result<TableHealth, StoreError> {
    let dead: Option<i64> = get(row, "dead_tuples", op)?;
    let oldest: Option<f64> = get(row, "oldest_transaction_seconds", op)?;
    Ok(TableHealth {
        dead_tuples: dead.map(|n| u64::try_from(n).unwrap_or(0)),
        oldest_transaction_age: oldest.map(seconds),
        horizon: holder(row, op)?,
    })
}

/// The holder's columns, null when nothing holds the horizon.
fn holder(row: &QueryResult, op: &'static str) -> Result<Option<HorizonHolder>, StoreError> {
    let Some(kind) = get::<Option<String>>(row, "holder_kind", op)? else {
        return Ok(None);
    };
    let kind = HorizonHolderKind::parse(&kind).ok_or_else(|| StoreError::Malformed {
        what: op,
        detail: format!("unknown horizon holder {kind:?}"),
    })?;
    Ok(Some(HorizonHolder {
        kind,
        pid: get(row, "holder_pid", op)?,
        name: get::<Option<String>>(row, "holder_name", op)?.unwrap_or_default(),
        user: get(row, "holder_user", op)?,
        state: get(row, "holder_state", op)?,
        age: get::<Option<f64>>(row, "holder_seconds", op)?.map(seconds),
        xid_age: get::<Option<i64>>(row, "holder_xid_age", op)?
            .map_or(0, |age| u64::try_from(age).unwrap_or(0)),
    }))
}

fn seconds(seconds: f64) -> Duration {
    Duration::from_secs_f64(seconds.max(0.0))
}
