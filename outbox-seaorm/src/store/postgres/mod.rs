//! PostgreSQL: a round in two statements when nothing failed.
//!
//! - The claim leases free buckets of a window of due rows and returns their
//!   shards' rows in one statement (`claim_due_oldest.sql`,
//!   `claim_due_newest.sql`), `FOR UPDATE SKIP
//!   LOCKED`, so that workers never wait for each other, and streams its rows
//!   to a decoder that reads them by column position. The synchronous flush
//!   claims the shards a request wrote the same way, inside the request's
//!   transaction before its commit (`claim_one_before_commit.sql`,
//!   `claim_before_commit.sql`), or one shard after a commit
//!   (`claim_shard.sql`).
//! - Finished flushes are completed in the background, many in one statement
//!   (`complete.sql`).
//! - The common commit releases the leases and deletes the delivered rows in
//!   one statement (`commit_finished.sql`), without waiting for the WAL flush.
//!   A round with failures, dead letters, recovered shards or deliveries
//!   still running commits in one transaction of a few statements instead.
//! - The bucket table is `UNLOGGED`: leases write no WAL, and a commit whose
//!   only writes are leases waits for no flush either.
//! - Background claims and the common commit read a bucket's row where this
//!   process last wrote it (`addresses.rs`, a TID scan), not through its
//!   key, which walks every version a held-back vacuum horizon keeps.
//!
//! The SQL lives in `sql/`, one file per statement; a statement that touches
//! an outbox table is written once (`sql/outbox/`) and rendered for each
//! table when the store is first built (`render.rs`, which says what differs).
//! [`sql_files`] lists them, for tools that name the statements a pool sends.

use std::sync::LazyLock;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbBackend, DbErr, QueryResult, Statement, StreamTrait,
    TransactionTrait, Value,
};

use outbox_core::shard::MAX_BUCKETS_PER_CLAIM;
use outbox_core::store::{
    ClaimOrder, ClaimRequest, CommitBatch, CommitOutcome, DrainStore, DueClaim, ShardClaim,
    StoreAdmin,
};
use outbox_core::{DeadLetterRow, FailingShard, OutboxKind, ShardDepth, ShardKey, StoreError};

use super::codec::{self, get, op};

mod addresses;
mod admin;
mod backlog;
mod commit;
mod due;
mod health;
mod render;
mod shard_claim;
mod sql_files;
mod watermark;

pub(crate) use shard_claim::claim_before_commit;
use shard_claim::decode_shard_claim;
pub use sql_files::sql_files;
use watermark::Scan;

/// A claim's stream failed: the database, or a row that does not decode.
enum DecodeOrDb {
    Db(DbErr),
    Decode(StoreError),
}

impl From<DbErr> for DecodeOrDb {
    fn from(error: DbErr) -> Self {
        Self::Db(error)
    }
}

impl From<StoreError> for DecodeOrDb {
    fn from(error: StoreError) -> Self {
        Self::Decode(error)
    }
}
use super::UnsupportedBackend;
use crate::time;

const BACKEND: DbBackend = DbBackend::Postgres;

/// The statements that touch one outbox table, rendered for it.
struct TableSql {
    claim_due_oldest: String,
    claim_due_newest: String,
    claim_due_above: String,
    claim_shard: String,
    claim_before_commit: String,
    claim_one_before_commit: String,
    commit_finished: String,
    complete: String,
    delete_rows: String,
    dead_letter: String,
    reschedule: String,
    reset_schedule: String,
    replay_dead_letters: String,
    shard_depths: String,
    deepest_shards: String,
    count_pending: String,
    backlog: String,
    has_due: String,
    pending_count: String,
    oldest_pending: String,
    max_id: String,
}

/// Both tables' statements, rendered once.
static TABLES: LazyLock<[TableSql; 2]> = LazyLock::new(|| {
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
            claim_due_oldest: render(include_str!("sql/outbox/claim_due_oldest.sql")),
            claim_due_newest: render(include_str!("sql/outbox/claim_due_newest.sql")),
            claim_due_above: render(include_str!("sql/outbox/claim_due_above.sql")),
            claim_shard: render(include_str!("sql/outbox/claim_shard.sql")),
            claim_before_commit: render(include_str!("sql/outbox/claim_before_commit.sql")),
            claim_one_before_commit: render(include_str!("sql/outbox/claim_one_before_commit.sql")),
            commit_finished: render(include_str!("sql/outbox/commit_finished.sql")),
            complete: render(include_str!("sql/outbox/complete.sql")),
            delete_rows: render(include_str!("sql/outbox/delete_rows.sql")),
            dead_letter: render(include_str!("sql/outbox/dead_letter.sql")),
            reschedule: render(include_str!("sql/outbox/reschedule.sql")),
            reset_schedule: render(include_str!("sql/outbox/reset_schedule.sql")),
            replay_dead_letters: render(include_str!("sql/outbox/replay_dead_letters.sql")),
            shard_depths: render(include_str!("sql/outbox/shard_depths.sql")),
            deepest_shards: render(include_str!("sql/outbox/deepest_shards.sql")),
            count_pending: render(include_str!("sql/outbox/count_pending.sql")),
            backlog: render(include_str!("sql/outbox/backlog.sql")),
            has_due: render(include_str!("sql/outbox/has_due.sql")),
            pending_count: render("SELECT count(*) AS n FROM {table}"),
            oldest_pending: render("SELECT min(date_added) AS oldest FROM {table}"),
            max_id: render("SELECT max(id) AS max_id FROM {table}"),
        }
    }
}

const RENEW: &str = include_str!("sql/renew.sql");
const EXPIRE_CLAIMS: &str = include_str!("sql/expire_claims.sql");
const FENCE: &str = include_str!("sql/fence.sql");
const UPSERT_STATES: &str = include_str!("sql/upsert_states.sql");
const DELETE_STATES: &str = include_str!("sql/delete_states.sql");
const FAILING_SHARDS: &str = include_str!("sql/failing_shards.sql");
const PARKED_SHARDS: &str = include_str!("sql/parked_shards.sql");
const DEAD_LETTERS: &str = include_str!("sql/dead_letters.sql");
const CREATE_BUCKETS: &str = include_str!("sql/create_buckets.sql");
const LOCK_FREE_BUCKETS: &str = include_str!("sql/lock_free_buckets.sql");
const RETRY_STATES: &str = include_str!("sql/retry_states.sql");
const TABLE_HEALTH: &str = include_str!("sql/table_health.sql");

fn table(kind: OutboxKind) -> &'static TableSql {
    match kind {
        OutboxKind::Region => &TABLES[0],
        OutboxKind::Control => &TABLES[1],
    }
}

fn statement(sql: &str, values: Vec<Value>) -> Statement {
    Statement::from_sql_and_values(BACKEND, sql, values)
}

/// Shard keys as parallel arrays (regions, scopes, identifiers) for `unnest`.
fn key_arrays<'a>(shards: impl IntoIterator<Item = &'a ShardKey>) -> [Value; 3] {
    let mut regions = Vec::new();
    let mut scopes = Vec::new();
    let mut identifiers = Vec::new();
    for shard in shards {
        regions.push(codec::region(shard));
        scopes.push(shard.scope());
        identifiers.push(shard.identifier());
    }
    [
        Value::from(regions),
        Value::from(scopes),
        Value::from(identifiers),
    ]
}

/// The outbox store on PostgreSQL. Cheap to clone (the connection is a pool);
/// every statement goes through the pool, none depends on session state, so
/// the pool may sit behind a transaction-pooling proxy.
#[derive(Clone, Debug)]
pub struct PgStore {
    db: DatabaseConnection,
    /// Where background claims scan from (shared by the clones).
    watermarks: std::sync::Arc<watermark::Watermarks>,
    /// Where this process last wrote each claim bucket's row (shared by
    /// the clones).
    addresses: std::sync::Arc<addresses::Addresses>,
}

impl PgStore {
    /// A store over `db`. The outbox migrations must have run.
    ///
    /// # Errors
    ///
    /// [`UnsupportedBackend`] when `db` is not PostgreSQL.
    pub fn new(db: DatabaseConnection) -> Result<Self, UnsupportedBackend> {
        match db.get_database_backend() {
            DbBackend::Postgres => {
                // The statements are rendered here rather than on a claim.
                LazyLock::force(&TABLES);
                Ok(Self {
                    db,
                    watermarks: std::sync::Arc::default(),
                    addresses: std::sync::Arc::default(),
                })
            }
            other => Err(UnsupportedBackend(other)),
        }
    }

    /// The connection.
    pub fn connection(&self) -> &DatabaseConnection {
        &self.db
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

#[async_trait]
impl DrainStore for PgStore {
    async fn claim_due(&self, request: &ClaimRequest) -> Result<DueClaim, StoreError> {
        const OP: &str = "claim due shards";
        let kind = request.kind;
        let mut values = vec![
            kind.as_i16().into(),
            request.now.into(),
            request.up_to_id.unwrap_or(i64::MAX).into(),
            codec::limit(request.rows).into(),
            codec::limit(MAX_BUCKETS_PER_CLAIM).into(),
            request.token.into(),
            request.owner.clone().into(),
            request.lease_until.into(),
            codec::limit(request.beyond).into(),
            codec::limit(request.shard_rows).into(),
        ];
        let sent = self.watermarks.scan(kind, request.order, request.now);
        let (from_at, from_id) = match sent.scan {
            Scan::Full => (watermark::scan_start(), i64::MIN),
            Scan::Above(id) => (outbox_core::store::due_at_once(), id),
        };
        values.extend([
            from_at.into(),
            from_id.into(),
            outbox_core::store::due_at_once().into(),
            self.addresses.all(kind).into(),
        ]);
        let sql = match (request.order, sent.scan) {
            (ClaimOrder::Oldest, Scan::Full) => &table(kind).claim_due_oldest,
            (ClaimOrder::Oldest, Scan::Above(_)) => &table(kind).claim_due_above,
            (ClaimOrder::Newest, _) => &table(kind).claim_due_newest,
        };
        if request.order == ClaimOrder::Oldest {
            values.push(codec::limit(request.held_rows).into());
        }
        // Decoded as they arrive, while the server still sends the rest.
        let mut decoder = due::Decoder::new(kind);
        let started = std::time::Instant::now();
        let result = async {
            let mut rows = self.db.stream_raw(statement(sql, values)).await?;
            while let Some(row) = rows.try_next().await? {
                decoder.push(&row)?;
            }
            Ok::<_, DecodeOrDb>(())
        }
        .await;
        match result {
            Ok(()) => {
                for &(bucket, address) in decoder.leased() {
                    self.addresses.record(kind, bucket, address);
                }
                let (marks, max_id) = decoder.marks();
                let took = started.elapsed();
                let claim = decoder.finish()?;
                let returned = claim.shards.iter().map(|shard| shard.rows.len()).sum();
                let rows = claim.scanned.max(returned);
                let cost = watermark::Cost { took, rows };
                self.watermarks
                    .observe(kind, sent, marks, max_id, request.now, cost);
                Ok(claim)
            }
            // Two claims creating the same missing buckets in the same
            // instant: the victim claims nothing this time.
            Err(DecodeOrDb::Db(error)) if codec::is_deadlock(&error) => Ok(DueClaim::default()),
            Err(DecodeOrDb::Db(error)) => Err(StoreError::database(OP, error)),
            Err(DecodeOrDb::Decode(error)) => Err(error),
        }
    }

    async fn claim_shard(
        &self,
        request: &ClaimRequest,
        shard: &ShardKey,
    ) -> Result<ShardClaim, StoreError> {
        const OP: &str = "claim a shard";
        let values = vec![
            request.kind.as_i16().into(),
            codec::region(shard).into(),
            shard.scope().into(),
            shard.identifier().into(),
            shard.bucket().into(),
            request.now.into(),
            request.token.into(),
            request.owner.clone().into(),
            request.lease_until.into(),
            request.up_to_id.unwrap_or(i64::MAX).into(),
            codec::limit(request.rows).into(),
        ];
        let rows = self
            .query_all(&table(request.kind).claim_shard, values, OP)
            .await?;
        decode_shard_claim(&rows, request, shard)
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
                vec![kind.as_i16().into(), token.into(), now.into(), until.into()],
            ))
            .await
            .map_err(op("renew claims"))?
            .rows_affected())
    }

    async fn commit(&self, batch: &CommitBatch) -> Result<CommitOutcome, StoreError> {
        if batch.is_finished() {
            self.commit_finished(batch).await
        } else {
            self.commit_in_transaction(batch).await
        }
    }

    async fn complete(&self, batches: &[CommitBatch]) -> Result<Vec<CommitOutcome>, StoreError> {
        let mut outcomes = vec![CommitOutcome::default(); batches.len()];
        // One statement for flushes of distinct buckets (the usual case: a
        // lease has one holder); a bucket met again, under the token that
        // took it after an expired one, goes in the next statement.
        let mut left: Vec<usize> = (0..batches.len()).collect();
        while !left.is_empty() {
            let mut buckets: Vec<i32> = Vec::new();
            let mut now: Vec<usize> = Vec::new();
            let mut later: Vec<usize> = Vec::new();
            for index in left {
                let mine = codec::batch_buckets(&batches[index]);
                if mine.iter().any(|bucket| buckets.contains(bucket)) {
                    later.push(index);
                } else {
                    buckets.extend(mine);
                    now.push(index);
                }
            }
            let done = self.complete_distinct(batches, &now).await?;
            for (index, outcome) in now.into_iter().zip(done) {
                outcomes[index] = outcome;
            }
            left = later;
        }
        Ok(outcomes)
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
                vec![kind.as_i16().into(), token.into(), now.into()],
            ))
            .await
            .map_err(op("expire abandoned claims"))?
            .rows_affected())
    }
}
