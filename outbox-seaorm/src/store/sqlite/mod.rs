//! SQLite: the same contract under SQLite's single writer.
//!
//! SQLite runs in-process, so a statement costs microseconds and a few of
//! them per claim cost nothing worth batching. Every claim and commit is one
//! `BEGIN IMMEDIATE` transaction: it takes the write lock up front, so it
//! sees the latest commits and never fails half-way on a lock upgrade, and
//! nothing can change between its reads and its writes. `FOR UPDATE SKIP
//! LOCKED` does not exist here, and is not needed.
//!
//! The SQL lives in `sql/`, one file per statement; statements that touch an
//! outbox table are written once, in `sql/outbox/`, and rendered for each
//! table (`crate::store::render`).
//! Timestamps are fixed-width UTC text, compared as text.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, QueryResult, Statement,
    Value,
};

use outbox_core::shard::MAX_BUCKETS_PER_CLAIM;
use outbox_core::store::{
    ClaimOrder, ClaimRequest, ClaimedShard, CommitBatch, CommitOutcome, DrainStore, DueClaim,
    ShardClaim, ShardCommit, ShardEnd, StoreAdmin, StoredRow,
};
use outbox_core::{
    DeadLetterRow, FailingShard, FencingToken, OutboxKind, ShardDepth, ShardKey, ShardState,
    StoreError,
};

use super::codec::{self, get, op};
use super::UnsupportedBackend;
use crate::time;

mod admin;
mod render;

const BACKEND: DbBackend = DbBackend::Sqlite;

/// The statements that touch one outbox table, rendered from `sql/outbox/`
/// (see `crate::store::render`).
struct TableSql {
    candidates: String,
    read_shard: String,
    delete_rows: String,
    dead_letter: String,
    reschedule: String,
    reset_schedule: String,
    replay_dead_letters: String,
    shard_depths: String,
    has_due: String,
    pending_count: String,
    oldest_pending: String,
    max_id: String,
}

/// Both tables' statements, rendered once.
static TABLES: std::sync::LazyLock<[TableSql; 2]> = std::sync::LazyLock::new(|| {
    [
        TableSql::render(OutboxKind::Region),
        TableSql::render(OutboxKind::Control),
    ]
});

impl TableSql {
    /// The statements of `kind`'s table.
    fn render(kind: OutboxKind) -> Self {
        let render = |source| render::render(source, kind);
        Self {
            candidates: render(include_str!("sql/outbox/candidates.sql")),
            read_shard: render(include_str!("sql/outbox/read_shard.sql")),
            delete_rows: render(include_str!("sql/outbox/delete_rows.sql")),
            dead_letter: render(include_str!("sql/outbox/dead_letter.sql")),
            reschedule: render(include_str!("sql/outbox/reschedule.sql")),
            reset_schedule: render(include_str!("sql/outbox/reset_schedule.sql")),
            replay_dead_letters: render(include_str!("sql/outbox/replay_dead_letters.sql")),
            shard_depths: render(include_str!("sql/outbox/shard_depths.sql")),
            has_due: render(include_str!("sql/outbox/has_due.sql")),
            pending_count: render("SELECT count(*) AS n FROM {table}"),
            oldest_pending: render("SELECT min(date_added) AS oldest FROM {table}"),
            max_id: render("SELECT max(id) AS max_id FROM {table}"),
        }
    }
}

const LEASE: &str = include_str!("sql/lease.sql");
const NEXT_FENCE: &str = include_str!("sql/next_fence.sql");
const BUCKET_HELD: &str = include_str!("sql/bucket_held.sql");
const STATES: &str = include_str!("sql/states.sql");
const RENEW: &str = include_str!("sql/renew.sql");
const EXPIRE_CLAIMS: &str = include_str!("sql/expire_claims.sql");
const FENCE: &str = include_str!("sql/fence.sql");
const UPSERT_STATE: &str = include_str!("sql/upsert_state.sql");
const DELETE_STATE: &str = include_str!("sql/delete_state.sql");
const RETRY_STATE: &str = include_str!("sql/retry_state.sql");
const DELETE_DEAD_LETTERS: &str = include_str!("sql/delete_dead_letters.sql");
const FAILING_SHARDS: &str = include_str!("sql/failing_shards.sql");
const PARKED_SHARDS: &str = include_str!("sql/parked_shards.sql");
const DEAD_LETTERS: &str = include_str!("sql/dead_letters.sql");

/// `candidates.sql` from the newest end of the due rows.
fn newest_first(kind: OutboxKind) -> &'static str {
    static NEWEST: std::sync::LazyLock<[String; 2]> = std::sync::LazyLock::new(|| {
        [OutboxKind::Region, OutboxKind::Control]
            .map(|kind| table(kind).candidates.replace("/*dir*/", "DESC"))
    });
    match kind {
        OutboxKind::Region => &NEWEST[0],
        OutboxKind::Control => &NEWEST[1],
    }
}

fn table(kind: OutboxKind) -> &'static TableSql {
    match kind {
        OutboxKind::Region => &TABLES[0],
        OutboxKind::Control => &TABLES[1],
    }
}

fn statement(sql: &str, values: Vec<Value>) -> Statement {
    Statement::from_sql_and_values(BACKEND, sql, values)
}

fn at(time: DateTime<Utc>) -> Value {
    time::bind(BACKEND, time)
}

/// A list as one JSON text value, read back with `json_each`.
fn json<T: serde::Serialize>(values: &T) -> Result<Value, StoreError> {
    serde_json::to_string(values)
        .map(Value::from)
        .map_err(|error| StoreError::database("encode a list", error))
}

/// Values of a statement about one shard: `first`, then scope and identifier,
/// then `rest`, then the region for the control outbox.
fn shard_values(shard: &ShardKey, first: Vec<Value>, rest: Vec<Value>) -> Vec<Value> {
    let mut values = first;
    values.push(shard.scope().into());
    values.push(shard.identifier().into());
    values.extend(rest);
    if shard.kind() == OutboxKind::Control {
        values.push(codec::region(shard).into());
    }
    values
}

/// The outbox store on SQLite. Cheap to clone (the connection is a pool).
/// Use WAL mode (`journal_mode=WAL`) when several connections write.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    db: DatabaseConnection,
}

impl SqliteStore {
    /// A store over `db`. The outbox migrations must have run.
    ///
    /// # Errors
    ///
    /// [`UnsupportedBackend`] when `db` is not SQLite.
    pub fn new(db: DatabaseConnection) -> Result<Self, UnsupportedBackend> {
        match db.get_database_backend() {
            DbBackend::Sqlite => Ok(Self { db }),
            other => Err(UnsupportedBackend(other)),
        }
    }

    /// The connection.
    pub fn connection(&self) -> &DatabaseConnection {
        &self.db
    }

    async fn begin(&self, operation: &'static str) -> Result<DatabaseTransaction, StoreError> {
        crate::begin_write(&self.db).await.map_err(op(operation))
    }

    async fn query_all(
        &self,
        sql: &str,
        values: Vec<Value>,
        operation: &'static str,
    ) -> Result<Vec<QueryResult>, StoreError> {
        self.db
            .query_all_raw(statement(sql, values))
            .await
            .map_err(op(operation))
    }

    async fn query_one(
        &self,
        sql: &str,
        values: Vec<Value>,
        operation: &'static str,
    ) -> Result<Option<QueryResult>, StoreError> {
        self.db
            .query_one_raw(statement(sql, values))
            .await
            .map_err(op(operation))
    }
}

async fn query_all(
    txn: &impl ConnectionTrait,
    sql: &str,
    values: Vec<Value>,
    operation: &'static str,
) -> Result<Vec<QueryResult>, StoreError> {
    txn.query_all_raw(statement(sql, values))
        .await
        .map_err(op(operation))
}

async fn execute(
    txn: &impl ConnectionTrait,
    sql: &str,
    values: Vec<Value>,
    operation: &'static str,
) -> Result<u64, StoreError> {
    Ok(txn
        .execute_raw(statement(sql, values))
        .await
        .map_err(op(operation))?
        .rows_affected())
}

/// Rows of one shard in id order, up to `up_to`, at most `rows`.
async fn read_shard(
    txn: &impl ConnectionTrait,
    shard: &ShardKey,
    up_to: Option<i64>,
    rows: usize,
) -> Result<Vec<StoredRow>, StoreError> {
    let values = shard_values(
        shard,
        Vec::new(),
        vec![up_to.unwrap_or(i64::MAX).into(), codec::limit(rows).into()],
    );
    let found = query_all(
        txn,
        &table(shard.kind()).read_shard,
        values,
        "read outbox rows",
    )
    .await?;
    let mut out = Vec::with_capacity(found.len());
    for row in &found {
        out.extend(codec::stored_row(row, BACKEND, shard)?);
    }
    Ok(out)
}

/// The backoff states of `shards`.
async fn states(
    txn: &impl ConnectionTrait,
    kind: OutboxKind,
    shards: &[&ShardKey],
) -> Result<HashMap<ShardKey, ShardState>, StoreError> {
    let keys: Vec<(String, i32, i64)> = shards
        .iter()
        .map(|shard| (codec::region(shard), shard.scope(), shard.identifier()))
        .collect();
    let rows = query_all(
        txn,
        STATES,
        vec![kind.as_i16().into(), json(&keys)?],
        "read backoff states",
    )
    .await?;
    Ok(codec::failing_shards(&rows, kind, BACKEND)?
        .into_iter()
        .map(|failing| (failing.shard, failing.state))
        .collect())
}

/// Leases `buckets` and draws the claim's fencing token.
async fn lease(
    txn: &impl ConnectionTrait,
    request: &ClaimRequest,
    buckets: &[i32],
) -> Result<FencingToken, StoreError> {
    execute(
        txn,
        LEASE,
        vec![
            request.kind.as_i16().into(),
            request.token.into(),
            request.owner.clone().into(),
            at(request.lease_until),
            json(&buckets)?,
        ],
        "lease buckets",
    )
    .await?;
    let rows = query_all(txn, NEXT_FENCE, Vec::new(), "draw a fencing token").await?;
    let value: i64 = match rows.first() {
        Some(row) => get(row, "value", "draw a fencing token")?,
        None => {
            return Err(StoreError::Malformed {
                what: "fencing token",
                detail: "the table outbox_fence has no row".to_owned(),
            })
        }
    };
    Ok(FencingToken::new(value))
}

/// The synchronous flush's claim inside the writer's transaction `txn`.
/// SQLite has one writer at a time, and `txn` is it: nothing can hold a
/// bucket but a live lease, and leasing cannot wait for anyone.
pub(crate) async fn claim_before_commit(
    txn: &impl ConnectionTrait,
    request: &ClaimRequest,
    shards: &[(ShardKey, i64)],
) -> Result<Vec<ShardClaim>, StoreError> {
    const OP: &str = "claim shards before the commit";
    let keys: Vec<&ShardKey> = shards.iter().map(|(shard, _)| shard).collect();
    let mut found_states = states(txn, request.kind, &keys).await?;
    let mut leased: Vec<(i32, FencingToken)> = Vec::new();
    let mut found = Vec::with_capacity(shards.len());
    for (shard, up_to) in shards {
        let state = found_states.remove(shard);
        if let Some(state) = state.as_ref().filter(|s| s.retry_at > request.now) {
            found.push(ShardClaim::BackingOff(state.clone()));
            continue;
        }
        let bucket = shard.bucket();
        let fence = match leased.iter().find(|(leased, _)| *leased == bucket) {
            Some((_, fence)) => *fence,
            None => {
                let held = query_all(
                    txn,
                    BUCKET_HELD,
                    vec![request.kind.as_i16().into(), bucket.into(), at(request.now)],
                    OP,
                )
                .await?;
                if !held.is_empty() {
                    found.push(ShardClaim::Held);
                    continue;
                }
                let fence = lease(txn, request, &[bucket]).await?;
                leased.push((bucket, fence));
                fence
            }
        };
        let rows = read_shard(txn, shard, Some(*up_to), request.rows).await?;
        found.push(ShardClaim::Claimed(ClaimedShard {
            shard: shard.clone(),
            rows,
            state,
            fence,
        }));
    }
    Ok(found)
}

#[async_trait]
impl DrainStore for SqliteStore {
    async fn claim_due(&self, request: &ClaimRequest) -> Result<DueClaim, StoreError> {
        const OP: &str = "claim due shards";
        let kind = request.kind;
        let txn = self.begin(OP).await?;
        let sql = match request.order {
            ClaimOrder::Oldest => &table(kind).candidates,
            ClaimOrder::Newest => newest_first(kind),
        };
        let found = query_all(
            &txn,
            sql,
            vec![
                at(request.now),
                request.up_to_id.unwrap_or(i64::MAX).into(),
                kind.as_i16().into(),
                codec::limit(request.scan_limit()).into(),
            ],
            OP,
        )
        .await?;
        let mut claim = DueClaim {
            scanned: found.len(),
            ..DueClaim::default()
        };
        // The window: the scanned rows of free buckets. Buckets in the order
        // it met them, at most half of them.
        let mut buckets: Vec<i32> = Vec::new();
        let mut window = Vec::new();
        for row in &found {
            if claim.window == request.rows {
                break;
            }
            if get::<bool>(row, "held", OP)? {
                continue;
            }
            claim.window += 1;
            let bucket: i32 = get(row, "bucket", OP)?;
            if !buckets.contains(&bucket) {
                if buckets.len() == MAX_BUCKETS_PER_CLAIM {
                    continue;
                }
                buckets.push(bucket);
            }
            let shard = codec::shard(row, kind)?;
            let stored = codec::stored_row(row, BACKEND, &shard)?;
            window.push((shard, stored, None));
        }
        if buckets.is_empty() {
            txn.commit().await.map_err(op(OP))?;
            return Ok(claim);
        }
        let fence = lease(&txn, request, &buckets).await?;
        let mut shards = codec::group(window, fence);
        let deep = shards.iter().filter(|s| s.rows.len() > 1).count();
        // A deep shard's share of the rows, when the window was full.
        let share = if claim.window >= request.rows {
            (request.rows + request.beyond) / deep.max(1)
        } else {
            0
        };
        let keys: Vec<&ShardKey> = shards.iter().map(|claimed| &claimed.shard).collect();
        let mut found_states = states(&txn, kind, &keys).await?;
        for claimed in &mut shards {
            let seen = claimed.rows.len();
            if let Some(state) = found_states.remove(&claimed.shard) {
                // A shard with a state may hold rescheduled rows that sort
                // after its newer due ones: its rows are read in id order,
                // once it may be tried again.
                let limit = request.rows.min(request.shard_rows);
                claimed.rows = if state.retry_at <= request.now {
                    read_shard(&txn, &claimed.shard, request.up_to_id, limit).await?
                } else {
                    Vec::new()
                };
                claimed.state = Some(state);
            } else if request.order == ClaimOrder::Newest || (seen > 1 && share > seen) {
                // From the newest end the window holds a shard's newest rows;
                // a deep shard reads on: either way, by range from its
                // oldest. (From the oldest end, a shard's window rows are
                // already its oldest: all its rows are due.)
                let limit = if seen > 1 { seen.max(share) } else { seen };
                let limit = limit.min(request.shard_rows);
                claimed.rows = read_shard(&txn, &claimed.shard, request.up_to_id, limit).await?;
            } else {
                claimed.rows.truncate(request.shard_rows);
            }
        }
        txn.commit().await.map_err(op(OP))?;
        claim.shards = shards;
        Ok(claim)
    }

    async fn claim_shard(
        &self,
        request: &ClaimRequest,
        shard: &ShardKey,
    ) -> Result<ShardClaim, StoreError> {
        const OP: &str = "claim a shard";
        let txn = self.begin(OP).await?;
        let state = states(&txn, request.kind, &[shard]).await?.remove(shard);
        if let Some(state) = state.as_ref().filter(|s| s.retry_at > request.now) {
            let state = state.clone();
            txn.commit().await.map_err(op(OP))?;
            return Ok(ShardClaim::BackingOff(state));
        }
        let held = query_all(
            &txn,
            BUCKET_HELD,
            vec![
                request.kind.as_i16().into(),
                shard.bucket().into(),
                at(request.now),
            ],
            OP,
        )
        .await?;
        if !held.is_empty() {
            txn.commit().await.map_err(op(OP))?;
            return Ok(ShardClaim::Held);
        }
        let fence = lease(&txn, request, &[shard.bucket()]).await?;
        let rows = read_shard(&txn, shard, request.up_to_id, request.rows).await?;
        txn.commit().await.map_err(op(OP))?;
        Ok(ShardClaim::Claimed(ClaimedShard {
            shard: shard.clone(),
            rows,
            state,
            fence,
        }))
    }

    async fn renew(
        &self,
        kind: OutboxKind,
        token: i64,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        Ok(self
            .db
            .execute_raw(statement(
                RENEW,
                vec![kind.as_i16().into(), token.into(), at(now), at(until)],
            ))
            .await
            .map_err(op("renew claims"))?
            .rows_affected())
    }

    async fn commit(&self, batch: &CommitBatch) -> Result<CommitOutcome, StoreError> {
        const OP: &str = "commit a drain round";
        let kind = batch.kind;
        let txn = self.begin(OP).await?;
        let fenced = query_all(
            &txn,
            FENCE,
            vec![
                kind.as_i16().into(),
                batch.token.into(),
                at(batch.now),
                json(&codec::buckets(&batch.in_flight))?,
                at(batch.renew_until),
                json(&codec::batch_buckets(batch))?,
            ],
            OP,
        )
        .await?;
        let (kept, mut outcome) = codec::fenced(batch, &fenced, OP)?;
        let ids: Vec<i64> = kept
            .iter()
            .flat_map(|shard| shard.delete_ids.iter().copied())
            .collect();
        if !ids.is_empty() {
            outcome.deleted =
                execute(&txn, &table(kind).delete_rows, vec![json(&ids)?], OP).await?;
        }
        for dead in kept.iter().flat_map(|shard| &shard.dead_letters) {
            let ids = json(&dead.ids)?;
            outcome.dead_lettered += execute(
                &txn,
                &table(kind).dead_letter,
                vec![
                    kind.as_i16().into(),
                    codec::storable_text(&dead.error).into(),
                    at(batch.now),
                    ids.clone(),
                ],
                OP,
            )
            .await?;
            execute(&txn, &table(kind).delete_rows, vec![ids], OP).await?;
        }
        for shard in &kept {
            apply_end(&txn, batch, shard).await?;
        }
        txn.commit().await.map_err(op(OP))?;
        Ok(outcome)
    }

    async fn expire_claims(
        &self,
        kind: OutboxKind,
        token: i64,
        now: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        Ok(self
            .db
            .execute_raw(statement(
                EXPIRE_CLAIMS,
                vec![kind.as_i16().into(), token.into(), at(now)],
            ))
            .await
            .map_err(op("expire abandoned claims"))?
            .rows_affected())
    }
}

/// A shard's backoff state and schedule after its commit.
async fn apply_end(
    txn: &DatabaseTransaction,
    batch: &CommitBatch,
    shard: &ShardCommit,
) -> Result<(), StoreError> {
    const OP: &str = "record backoff";
    let kind = batch.kind;
    let key = &shard.shard;
    let state_key = || -> Vec<Value> {
        vec![
            kind.as_i16().into(),
            codec::region(key).into(),
            key.scope().into(),
            key.identifier().into(),
        ]
    };
    let later = match &shard.end {
        ShardEnd::Done => None,
        ShardEnd::Recovered => {
            forget_state(txn, key, batch.now).await?;
            None
        }
        ShardEnd::Wait { retry_at } => Some(*retry_at),
        ShardEnd::Backoff {
            retry_at,
            delay,
            error,
            attempts,
        } => {
            let mut values = state_key();
            values.extend([
                i32::try_from(*attempts).unwrap_or(i32::MAX).into(),
                codec::millis(*delay).into(),
                at(*retry_at),
                codec::error_text(error).into(),
                at(batch.now),
            ]);
            execute(txn, UPSERT_STATE, values, OP).await?;
            Some(*retry_at)
        }
    };
    if let Some(retry_at) = later {
        let values = shard_values(key, vec![at(retry_at), at(batch.now)], Vec::new());
        execute(txn, &table(kind).reschedule, values, OP).await?;
    }
    Ok(())
}

/// Forgets the backoff state of `shard` and makes its rows due again: a
/// recovered shard, or one retried now.
async fn forget_state(
    txn: &DatabaseTransaction,
    shard: &ShardKey,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    const OP: &str = "forget a backoff state";
    let kind = shard.kind();
    let key = vec![
        kind.as_i16().into(),
        codec::region(shard).into(),
        shard.scope().into(),
        shard.identifier().into(),
    ];
    execute(txn, DELETE_STATE, key, OP).await?;
    let values = shard_values(
        shard,
        vec![at(outbox_core::store::due_at_once()), at(now)],
        Vec::new(),
    );
    execute(txn, &table(kind).reset_schedule, values, OP).await?;
    Ok(())
}
