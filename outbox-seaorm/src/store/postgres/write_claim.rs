//! The claim a write takes with its insert (`claim_with_write.sql`): the
//! synchronous flush's claim of the one shard a write writes, made by the
//! statement that inserts its rows.

use sea_orm::{ConnectionTrait, DbErr, Value};

use outbox_core::{ClaimRequest, ClaimedShard, OutboxKind, ShardClaim, ShardKey, StoreError};

use super::{statement, BACKEND};
use crate::store::codec::{self, get};

const REGION: &str = include_str!("sql/region/claim_with_write.sql");
const CONTROL: &str = include_str!("sql/control/claim_with_write.sql");

/// The statement's text for `kind`.
pub(super) fn sql(kind: OutboxKind) -> &'static str {
    match kind {
        OutboxKind::Region => REGION,
        OutboxKind::Control => CONTROL,
    }
}

/// Why an insert with a claim failed.
#[derive(Debug)]
pub(crate) enum InsertClaimError {
    /// The statement failed: nothing was written (and the transaction, on
    /// PostgreSQL, must roll back).
    Database(DbErr),
    /// The answer did not decode.
    Decode(StoreError),
}

/// Runs `insert` (an `INSERT … RETURNING *` of rows of `shard` alone, with
/// its `values`) and claims `shard` in the same statement. Returns the ids
/// inserted, in order, and what the claim found: the shard's older pending
/// rows and the inserted ones, when it leased the bucket.
pub(crate) async fn insert_and_claim<C: ConnectionTrait>(
    conn: &C,
    insert: &str,
    mut values: Vec<Value>,
    request: &ClaimRequest,
    shard: &ShardKey,
) -> Result<(Vec<i64>, ShardClaim), InsertClaimError> {
    let mut sql = sql(request.kind).replace("{insert}", insert);
    // The claim's parameters follow the insert's; the longest names first,
    // so that none is the start of another one replaced before it.
    let claim: [(&str, Value); 10] = [
        ("$lease_until", request.lease_until.into()),
        ("$identifier", shard.identifier().into()),
        ("$bucket", shard.bucket().into()),
        ("$region", codec::region(shard).into()),
        ("$scope", shard.scope().into()),
        ("$token", request.token.into()),
        ("$owner", request.owner.clone().into()),
        ("$kind", request.kind.as_i16().into()),
        ("$rows", codec::limit(request.rows).into()),
        ("$now", request.now.into()),
    ];
    for (name, value) in claim {
        values.push(value);
        sql = sql.replace(name, &format!("${}", values.len()));
    }
    let rows = conn
        .query_all_raw(statement(&sql, values))
        .await
        .map_err(InsertClaimError::Database)?;
    decode(&rows, request, shard).map_err(InsertClaimError::Decode)
}

fn decode(
    rows: &[sea_orm::QueryResult],
    request: &ClaimRequest,
    shard: &ShardKey,
) -> Result<(Vec<i64>, ShardClaim), StoreError> {
    const OP: &str = "claim a shard with its insert";
    let (mut older, mut inserted) = (Vec::new(), Vec::new());
    let mut ids = Vec::new();
    for row in rows {
        let Some(stored) = codec::stored_row(row, BACKEND, shard)? else {
            continue;
        };
        if get::<i32>(row, "part", OP)? == 0 {
            older.push(stored);
        } else {
            ids.push(stored.id);
            inserted.push(stored);
        }
    }
    let Some(first) = rows.first() else {
        return Err(StoreError::Malformed {
            what: "claim with an insert",
            detail: "the insert returned no row".to_owned(),
        });
    };
    let state = codec::state(first, BACKEND)?;
    if let Some(state) = state.as_ref().filter(|s| s.retry_at > request.now) {
        return Ok((ids, ShardClaim::BackingOff(state.clone())));
    }
    if get::<i64>(first, "claimed", OP)? == 0 {
        return Ok((ids, ShardClaim::Held));
    }
    let fence = get::<Option<i64>>(first, "fence", OP)?
        .map(outbox_core::FencingToken::new)
        .ok_or_else(|| StoreError::Malformed {
            what: "claim with an insert",
            detail: "a leased shard came without a fencing token".to_owned(),
        })?;
    // The older rows are the shard's oldest pending ones, in id order; the
    // inserted rows follow them only if none was left unread.
    if older.len() < request.rows {
        older.append(&mut inserted);
    }
    Ok((
        ids,
        ShardClaim::Claimed(ClaimedShard {
            shard: shard.clone(),
            rows: older,
            state,
            fence,
        }),
    ))
}
