//! What `backlog.sql` answers: the backlog gauges' figures of one outbox
//! table, one row per scope with pending rows (or one row with a null
//! scope), each carrying the table's figures.

use outbox_core::store::{BacklogReading, Count, ScopeDepth};
use outbox_core::StoreError;
use sea_orm::QueryResult;

use super::{health, BACKEND};
use crate::store::codec::get;
use crate::store::snapshot::capped;
use crate::time;

/// Reads the statement's rows, counts capped at `cap`.
pub(super) fn decode(
    rows: &[QueryResult],
    cap: u64,
    op: &'static str,
) -> Result<BacklogReading, StoreError> {
    let Some(first) = rows.first() else {
        return Err(StoreError::Malformed {
            what: op,
            detail: "the backlog statement answered no row".to_owned(),
        });
    };
    let counted: i64 = get(first, "counted", op)?;
    let estimate: Option<i64> = get(first, "estimate", op)?;
    let pending = capped(counted, estimate, cap);
    // Every row of the table was seen: the scopes' counts are exact.
    let whole = pending.is_exact();
    let number = |row: &QueryResult, column: &'static str| -> Result<u64, StoreError> {
        Ok(u64::try_from(get::<i64>(row, column, op)?).unwrap_or(0))
    };
    let mut scopes = Vec::new();
    for row in rows {
        let Some(scope) = get::<Option<i32>>(row, "shard_scope", op)? else {
            continue;
        };
        let seen = number(row, "scope_counted")?;
        let frequency: Option<f64> = get(row, "frequency", op)?;
        let depth = if whole {
            Count::Exact(seen)
        } else {
            match frequency {
                // The scope's share of the planner's estimate of the table.
                Some(share) => {
                    let estimate = (share * pending.value() as f64).round() as u64;
                    if estimate > seen {
                        Count::Estimated(estimate)
                    } else {
                        Count::AtLeast(seen.max(1))
                    }
                }
                None => Count::AtLeast(seen.max(1)),
            }
        };
        let oldest =
            time::get_opt(row, BACKEND, "scope_oldest")?.ok_or_else(|| StoreError::Malformed {
                what: op,
                detail: format!("scope {scope} has pending rows but no oldest one"),
            })?;
        scopes.push(ScopeDepth {
            scope,
            depth,
            oldest_date_added: oldest,
        });
    }
    Ok(BacklogReading {
        pending,
        oldest_date_added: time::get_opt(first, BACKEND, "oldest_date_added")?,
        failing_shards: number(first, "failing")?,
        parked_shards: number(first, "parked")?,
        quarantined_shards: number(first, "quarantined")?,
        paused_shards: number(first, "paused")?,
        health: health::decode(first, op)?,
        dead_letters: Count::up_to(number(first, "dead_letters")?, cap),
        scopes,
    })
}
