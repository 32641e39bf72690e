//! Claims of the shards a caller names: a flush's, inside the writer's
//! transaction before its commit (`claim_one_before_commit.sql`,
//! `claim_before_commit.sql`) or after it (`claim_shard.sql`).

use sea_orm::{ConnectionTrait, QueryResult};

use outbox_core::store::{ClaimRequest, ClaimedShard, ShardClaim};
use outbox_core::{FencingToken, ShardKey, StoreError};

use super::{key_arrays, statement, table, BACKEND};
use crate::store::codec::{self, get, op};

/// A claim of one shard (`claim_shard.sql`, `claim_one_before_commit.sql`):
/// every row repeats whether the bucket was claimed and the shard's state.
pub(super) fn decode_shard_claim(
    rows: &[QueryResult],
    request: &ClaimRequest,
    shard: &ShardKey,
) -> Result<ShardClaim, StoreError> {
    const OP: &str = "claim a shard";
    let Some(first) = rows.first() else {
        return Err(StoreError::Malformed {
            what: "shard claim",
            detail: "the claim returned no row".to_owned(),
        });
    };
    let state = codec::state(first, BACKEND)?;
    if let Some(state) = state.as_ref().filter(|s| s.retry_at > request.now) {
        return Ok(ShardClaim::BackingOff(state.clone()));
    }
    if get::<i64>(first, "claimed", OP)? == 0 {
        return Ok(ShardClaim::Held);
    }
    let mut claimed = ClaimedShard {
        shard: shard.clone(),
        rows: Vec::with_capacity(rows.len()),
        state,
        fence: fence(first)?,
    };
    for row in rows {
        claimed.rows.extend(codec::stored_row(row, BACKEND, shard)?);
    }
    Ok(ShardClaim::Claimed(claimed))
}

/// The fencing token of a claim that leased a bucket.
fn fence(row: &QueryResult) -> Result<FencingToken, StoreError> {
    get::<Option<i64>>(row, "fence", "claim a shard")?
        .map(FencingToken::new)
        .ok_or_else(|| StoreError::Malformed {
            what: "shard claim",
            detail: "a leased shard came without a fencing token".to_owned(),
        })
}

/// The synchronous flush's claim inside the writer's transaction `conn`
/// (see `claim_one_before_commit.sql`, and `claim_before_commit.sql` for
/// several shards).
pub(crate) async fn claim_before_commit<C: ConnectionTrait>(
    conn: &C,
    request: &ClaimRequest,
    shards: &[(ShardKey, i64)],
) -> Result<Vec<ShardClaim>, StoreError> {
    const OP: &str = "claim shards before the commit";
    let kind = request.kind;
    if let [(shard, up_to)] = shards {
        let values = vec![
            kind.as_i16().into(),
            codec::region(shard).into(),
            shard.scope().into(),
            shard.identifier().into(),
            shard.bucket().into(),
            request.now.into(),
            request.token.into(),
            request.owner.clone().into(),
            request.lease_until.into(),
            (*up_to).into(),
            codec::limit(request.rows).into(),
        ];
        let rows = conn
            .query_all_raw(statement(&table(kind).claim_one_before_commit, values))
            .await
            .map_err(op(OP))?;
        return Ok(vec![decode_shard_claim(&rows, request, shard)?]);
    }
    let [regions, scopes, identifiers] = key_arrays(shards.iter().map(|(shard, _)| shard));
    let up_to: Vec<i64> = shards.iter().map(|(_, id)| *id).collect();
    let values = vec![
        kind.as_i16().into(),
        request.now.into(),
        request.token.into(),
        request.owner.clone().into(),
        request.lease_until.into(),
        regions,
        scopes,
        identifiers,
        up_to.into(),
        codec::limit(request.rows).into(),
        codec::buckets(shards.iter().map(|(shard, _)| shard)).into(),
    ];
    let rows = conn
        .query_all_raw(statement(&table(kind).claim_before_commit, values))
        .await
        .map_err(op(OP))?;
    let mut found: Vec<ShardClaim> = Vec::with_capacity(shards.len());
    let mut rows = rows.iter().peekable();
    for (ord, (shard, _)) in (1i64..).zip(shards) {
        let mut claim: Option<ShardClaim> = None;
        while let Some(row) = rows.next_if(|row| get::<i64>(row, "ord", OP).ok() == Some(ord)) {
            if claim.is_none() {
                let state = codec::state(row, BACKEND)?;
                claim = Some(match state {
                    Some(state) if state.retry_at > request.now => ShardClaim::BackingOff(state),
                    state if get::<bool>(row, "claimed", OP)? => {
                        ShardClaim::Claimed(ClaimedShard {
                            shard: shard.clone(),
                            rows: Vec::new(),
                            state,
                            fence: fence(row)?,
                        })
                    }
                    _ => ShardClaim::Held,
                });
            }
            if let Some(ShardClaim::Claimed(claimed)) = claim.as_mut() {
                claimed.rows.extend(codec::stored_row(row, BACKEND, shard)?);
            }
        }
        found.push(claim.ok_or_else(|| StoreError::Malformed {
            what: "claim before the commit",
            detail: format!("no result row for shard {shard}"),
        })?);
    }
    Ok(found)
}
