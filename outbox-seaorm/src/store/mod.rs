//! The PostgreSQL and SQLite [`Store`] behind one type.
//!
//! [`SeaOrmStore`] wraps a SeaORM `DatabaseConnection`. Claims are the same
//! statements on both backends (here); reading and committing differ and live
//! in the backend modules: [`postgres`] batches across shards with arrays and
//! `LATERAL`, [`sqlite`] relies on SQLite's single writer and runs cheap
//! per-shard statements. Both expose the same functions; the SQL lives in
//! `queries/common/<name>.sql` when both backends run it, else in
//! `queries/<backend>/<name>.sql`. `render` fills their `{placeholders}`;
//! `{lock_live_claims}` inlines `queries/postgres/lock_live_claims.sql`, the
//! one place that says in which order claim rows are locked.

pub mod postgres;
pub mod sqlite;

use std::collections::HashSet;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement, Value};

use outbox_core::{
    ClaimRequest, CommitBatch, CommitOutcome, DeadLetterRow, OutboxKind, ShardClaim, ShardCommit,
    ShardDepth, ShardEnd, ShardKey, ShardRead, Store, StoreError, StoredRow,
};
use sea_orm::TransactionTrait;

use crate::time;

/// A [`Store`] over PostgreSQL or SQLite through SeaORM.
///
/// Cheap to clone (the connection is a pool).
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let db = sea_orm::Database::connect("sqlite://outbox.sqlite?mode=rwc").await?;
/// let store = outbox_seaorm::SeaOrmStore::new(db)?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SeaOrmStore {
    db: DatabaseConnection,
    backend: DbBackend,
    queries: std::sync::Arc<[Queries; 2]>,
}

/// The statements of one outbox kind, rendered for one backend.
#[derive(Debug)]
pub(crate) struct Queries {
    pub(crate) kind: OutboxKind,
    pub(crate) claim_due: String,
    pub(crate) claim_shard: String,
    pub(crate) read_rows: String,
    pub(crate) fence: String,
    pub(crate) expire_claims: String,
    pub(crate) delete_rows: String,
    /// SQLite only: end every live claim of a round.
    pub(crate) release_all: String,
    /// PostgreSQL only: fence, release and delete a finished round at once.
    pub(crate) release_all_and_delete: String,
    pub(crate) dead_letter: String,
    pub(crate) replay_dead_letters: String,
    pub(crate) list_dead_letters: String,
    pub(crate) release_some: String,
    pub(crate) backoff_claim: String,
    pub(crate) backoff_rows: String,
    pub(crate) shard_depths: String,
    pub(crate) has_due: String,
    pub(crate) pending_count: String,
    pub(crate) oldest_pending: String,
    pub(crate) max_id: String,
}

/// The database is neither PostgreSQL nor SQLite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the outbox supports PostgreSQL and SQLite; this connection is {0:?}")]
pub struct UnsupportedBackend(pub DbBackend);

impl SeaOrmStore {
    /// A store over `db`. The outbox migrations must have run.
    ///
    /// # Errors
    ///
    /// [`UnsupportedBackend`] for a database other than PostgreSQL or SQLite.
    pub fn new(db: DatabaseConnection) -> Result<Self, UnsupportedBackend> {
        let backend = db.get_database_backend();
        if !matches!(backend, DbBackend::Postgres | DbBackend::Sqlite) {
            return Err(UnsupportedBackend(backend));
        }
        Ok(Self {
            db,
            backend,
            queries: std::sync::Arc::new([
                Queries::render(OutboxKind::Region, backend),
                Queries::render(OutboxKind::Control, backend),
            ]),
        })
    }

    /// The connection.
    pub fn connection(&self) -> &DatabaseConnection {
        &self.db
    }

    fn queries(&self, kind: OutboxKind) -> &Queries {
        match kind {
            OutboxKind::Region => &self.queries[0],
            OutboxKind::Control => &self.queries[1],
        }
    }
}

impl Queries {
    /// Renders the statements of `kind` for `backend`: the shared ones from
    /// `queries/common/`, the rest from the backend's folder.
    fn render(kind: OutboxKind, backend: DbBackend) -> Self {
        let postgres = backend == DbBackend::Postgres;
        let region_literal = if postgres { "''::text" } else { "''" };
        let r = |template: &str| render(template, kind, region_literal);
        let table = table(kind);
        let (read_rows, delete_rows, release_some, release_all_and_delete) = if postgres {
            (
                include_str!("queries/postgres/read_rows.sql"),
                include_str!("queries/postgres/delete_rows.sql"),
                include_str!("queries/postgres/release_some.sql"),
                include_str!("queries/postgres/release_all_and_delete.sql"),
            )
        } else {
            (
                include_str!("queries/sqlite/read_rows.sql"),
                include_str!("queries/sqlite/delete_rows.sql"),
                include_str!("queries/sqlite/release_one.sql"),
                "",
            )
        };
        let (fence, expire_claims) = if postgres {
            (
                include_str!("queries/postgres/fence.sql"),
                include_str!("queries/postgres/expire_claims.sql"),
            )
        } else {
            (
                include_str!("queries/sqlite/fence.sql"),
                include_str!("queries/sqlite/expire_claims.sql"),
            )
        };
        let (dead_letter, replay_dead_letters) = if postgres {
            (
                include_str!("queries/postgres/dead_letter.sql"),
                include_str!("queries/postgres/replay_dead_letters.sql"),
            )
        } else {
            (
                include_str!("queries/sqlite/dead_letter.sql"),
                include_str!("queries/sqlite/replay_dead_letters.sql"),
            )
        };
        Self {
            kind,
            claim_due: r(include_str!("queries/common/claim_due.sql")),
            claim_shard: r(include_str!("queries/common/claim_shard.sql")),
            read_rows: r(read_rows),
            fence: r(fence),
            expire_claims: r(expire_claims),
            delete_rows: r(delete_rows),
            release_all: r(include_str!("queries/sqlite/release_all.sql")),
            release_some: r(release_some),
            release_all_and_delete: r(release_all_and_delete),
            dead_letter: r(dead_letter),
            replay_dead_letters: r(replay_dead_letters),
            list_dead_letters: "SELECT id, region_name, shard_scope, shard_identifier, category, \
                object_identifier, payload, scheduled_from, scheduled_for, date_added, error, \
                dead_lettered_at FROM outbox_dead_letter WHERE kind = $1 \
                ORDER BY dead_lettered_at, id LIMIT $2"
                .to_owned(),
            backoff_claim: r(include_str!("queries/common/backoff_claim.sql")),
            backoff_rows: r(include_str!("queries/common/backoff_rows.sql")),
            shard_depths: r(include_str!("queries/common/shard_depths.sql")),
            has_due: r(include_str!("queries/common/has_due.sql")),
            pending_count: format!("SELECT count(*) AS n FROM {table}"),
            oldest_pending: format!("SELECT min(date_added) AS oldest FROM {table}"),
            max_id: format!("SELECT max(id) AS max_id FROM {table}"),
        }
    }
}

/// The table of an outbox kind.
pub(crate) fn table(kind: OutboxKind) -> &'static str {
    match kind {
        OutboxKind::Region => "region_outbox",
        OutboxKind::Control => "control_outbox",
    }
}

/// Fills a query template for one kind.
pub(crate) fn render(template: &str, kind: OutboxKind, region_literal: &str) -> String {
    let control = kind == OutboxKind::Control;
    let mut sql = template
        .replace(
            "{lock_live_claims}",
            concat!("\n", include_str!("queries/postgres/lock_live_claims.sql")),
        )
        .replace("{table}", table(kind))
        .replace(
            "{region_select}",
            if control {
                "o.region_name"
            } else {
                region_literal
            },
        )
        .replace(
            "{region_group}",
            if control { "o.region_name," } else { "" },
        )
        .replace("{region_column}", if control { "region_name," } else { "" })
        .replace("{region_value}", if control { "region_name," } else { "" })
        .replace(
            "{region_match}",
            if control {
                "o.region_name = s.region_name AND"
            } else {
                ""
            },
        );
    for n in 1..=9 {
        let marker = format!("{{region_eq_{n}}}");
        if sql.contains(&marker) {
            let condition = if control {
                format!("AND region_name = ${n}")
            } else {
                String::new()
            };
            sql = sql.replace(&marker, &condition);
        }
    }
    sql
}

pub(crate) fn statement(backend: DbBackend, sql: &str, values: Vec<Value>) -> Statement {
    Statement::from_sql_and_values(backend, sql, values)
}

pub(crate) fn db_error(operation: &'static str) -> impl Fn(DbErr) -> StoreError {
    move |error| StoreError::database(operation, error)
}

/// Reads the optional backoff columns of a claim row.
pub(crate) fn claim_from_row(
    row: &sea_orm::QueryResult,
    shard: outbox_core::ShardKey,
    request: &ClaimRequest,
) -> Result<ShardClaim, StoreError> {
    let last_backoff_ms: Option<i64> = row
        .try_get("", "last_backoff_ms")
        .map_err(db_error("read a claim"))?;
    let attempts: i32 = row
        .try_get("", "attempts")
        .map_err(db_error("read a claim"))?;
    Ok(ShardClaim {
        shard,
        token: request.token,
        lease_until: request.lease_until,
        last_backoff: last_backoff_ms
            .filter(|ms| *ms > 0)
            .map(|ms| std::time::Duration::from_millis(ms as u64)),
        attempts: attempts.max(0) as u32,
    })
}

#[async_trait]
impl Store for SeaOrmStore {
    async fn claim_due(&self, request: &ClaimRequest) -> Result<Vec<ShardClaim>, StoreError> {
        let queries = self.queries(request.kind);
        claim_due(&self.db, queries, request).await
    }

    async fn claim_shard(
        &self,
        request: &ClaimRequest,
        shard: &outbox_core::ShardKey,
    ) -> Result<Option<ShardClaim>, StoreError> {
        let queries = self.queries(request.kind);
        claim_shard(&self.db, queries, request, shard).await
    }

    async fn read_rows(
        &self,
        kind: OutboxKind,
        shards: &[ShardRead],
        limit: usize,
    ) -> Result<Vec<StoredRow>, StoreError> {
        let queries = self.queries(kind);
        match self.backend {
            DbBackend::Postgres => postgres::read_rows(&self.db, queries, shards, limit).await,
            _ => sqlite::read_rows(&self.db, queries, shards, limit).await,
        }
    }

    async fn commit(&self, batch: &CommitBatch) -> Result<CommitOutcome, StoreError> {
        let queries = self.queries(batch.kind);
        match self.backend {
            DbBackend::Postgres => postgres::commit(&self.db, queries, batch).await,
            _ => sqlite::commit(&self.db, queries, batch).await,
        }
    }

    async fn pending_count(&self, kind: OutboxKind) -> Result<u64, StoreError> {
        let sql = &self.queries(kind).pending_count;
        let row = self
            .db
            .query_one_raw(statement(self.backend, sql, vec![]))
            .await
            .map_err(db_error("count pending rows"))?;
        let count: i64 = match row {
            Some(row) => row
                .try_get("", "n")
                .map_err(db_error("count pending rows"))?,
            None => 0,
        };
        Ok(count.max(0) as u64)
    }

    async fn shard_depths(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<ShardDepth>, StoreError> {
        let sql = &self.queries(kind).shard_depths;
        let rows = self
            .db
            .query_all_raw(statement(
                self.backend,
                sql,
                vec![Value::from(limit.min(i64::MAX as usize) as i64)],
            ))
            .await
            .map_err(db_error("measure shard depths"))?;
        rows.iter()
            .map(|row| {
                let op = db_error("measure shard depths");
                let region: String = row.try_get("", "region_name").map_err(&op)?;
                let scope: i32 = row.try_get("", "shard_scope").map_err(&op)?;
                let identifier: i64 = row.try_get("", "shard_identifier").map_err(&op)?;
                let depth: i64 = row.try_get("", "depth").map_err(&op)?;
                Ok(ShardDepth {
                    shard: outbox_core::ShardKey::from_raw(kind, scope, identifier, Some(region)),
                    depth: depth.max(0) as u64,
                    oldest_date_added: crate::time::get(row, self.backend, "oldest_date_added")?,
                    next_scheduled_for: crate::time::get(row, self.backend, "next_scheduled_for")?,
                })
            })
            .collect()
    }

    async fn oldest_pending(&self, kind: OutboxKind) -> Result<Option<DateTime<Utc>>, StoreError> {
        let sql = &self.queries(kind).oldest_pending;
        let row = self
            .db
            .query_one_raw(statement(self.backend, sql, vec![]))
            .await
            .map_err(db_error("find the oldest pending row"))?;
        match row {
            Some(row) => crate::time::get_opt(&row, self.backend, "oldest"),
            None => Ok(None),
        }
    }

    async fn has_due(&self, kind: OutboxKind, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let sql = &self.queries(kind).has_due;
        let row = self
            .db
            .query_one_raw(statement(
                self.backend,
                sql,
                vec![
                    Value::from(kind.as_i16()),
                    crate::time::bind(self.backend, now),
                ],
            ))
            .await
            .map_err(db_error("look for due rows"))?;
        Ok(row.is_some())
    }

    async fn dead_letters(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<DeadLetterRow>, StoreError> {
        let rows = self
            .db
            .query_all_raw(statement(
                self.backend,
                &self.queries(kind).list_dead_letters,
                vec![
                    Value::from(kind.as_i16()),
                    Value::from(limit.min(i64::MAX as usize) as i64),
                ],
            ))
            .await
            .map_err(db_error("list dead letters"))?;
        rows.iter()
            .map(|row| {
                let op = db_error("list dead letters");
                let region: String = row.try_get("", "region_name").map_err(&op)?;
                let scope: i32 = row.try_get("", "shard_scope").map_err(&op)?;
                let identifier: i64 = row.try_get("", "shard_identifier").map_err(&op)?;
                let shard = ShardKey::from_raw(kind, scope, identifier, Some(region));
                Ok(DeadLetterRow {
                    row: row_from_result(row, self.backend, shard)?,
                    error: row.try_get("", "error").map_err(&op)?,
                    dead_lettered_at: time::get(row, self.backend, "dead_lettered_at")?,
                })
            })
            .collect()
    }

    async fn replay_dead_letters(&self, kind: OutboxKind, ids: &[i64]) -> Result<u64, StoreError> {
        let txn = self
            .db
            .begin()
            .await
            .map_err(db_error("replay dead letters"))?;
        let queries = self.queries(kind);
        let list = id_list(self.backend, ids)?;
        let values = vec![
            Value::from(kind.as_i16()),
            list.clone(),
            time::bind(self.backend, outbox_core::the_past()),
        ];
        let moved = txn
            .execute_raw(statement(
                self.backend,
                &queries.replay_dead_letters,
                values,
            ))
            .await
            .map_err(db_error("replay dead letters"))?
            .rows_affected();
        if self.backend == DbBackend::Sqlite {
            txn.execute_raw(statement(
                self.backend,
                "DELETE FROM outbox_dead_letter WHERE kind = $1 AND id IN (SELECT value FROM json_each($2))",
                vec![Value::from(kind.as_i16()), list],
            ))
            .await
            .map_err(db_error("replay dead letters"))?;
        }
        txn.commit()
            .await
            .map_err(db_error("replay dead letters"))?;
        Ok(moved)
    }

    async fn expire_claims(
        &self,
        kind: OutboxKind,
        token: i64,
        now: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        let result = self
            .db
            .execute_raw(statement(
                self.backend,
                &self.queries(kind).expire_claims,
                vec![
                    Value::from(kind.as_i16()),
                    Value::from(token),
                    crate::time::bind(self.backend, now),
                ],
            ))
            .await
            .map_err(db_error("expire abandoned claims"))?;
        Ok(result.rows_affected())
    }

    async fn max_id(&self, kind: OutboxKind) -> Result<Option<i64>, StoreError> {
        let sql = &self.queries(kind).max_id;
        let row = self
            .db
            .query_one_raw(statement(self.backend, sql, vec![]))
            .await
            .map_err(db_error("find the highest row id"))?;
        match row {
            Some(row) => row
                .try_get("", "max_id")
                .map_err(db_error("find the highest row id")),
            None => Ok(None),
        }
    }
}

// Helpers shared by both backends.

/// A list of ids as one bind value: an array on PostgreSQL, JSON text on
/// SQLite (read with `json_each`).
pub(crate) fn id_list(backend: DbBackend, ids: &[i64]) -> Result<Value, StoreError> {
    Ok(match backend {
        DbBackend::Postgres => Value::from(ids.to_vec()),
        _ => Value::from(
            serde_json::to_string(ids).map_err(|e| StoreError::database("encode row ids", e))?,
        ),
    })
}

/// Deletes the delivered (or culled) rows of the owned shards, in statements
/// of at most `delete_chunk` ids.
pub(crate) async fn delete_delivered<Db: ConnectionTrait>(
    txn: &Db,
    backend: DbBackend,
    queries: &Queries,
    batch: &CommitBatch,
    owned_shards: &[&ShardCommit],
) -> Result<u64, StoreError> {
    let ids: Vec<i64> = owned_shards
        .iter()
        .flat_map(|s| s.delete_ids.iter().copied())
        .collect();
    let mut deleted = 0;
    for chunk in ids.chunks(batch.delete_chunk.max(1)) {
        deleted += txn
            .execute_raw(statement(
                backend,
                &queries.delete_rows,
                vec![id_list(backend, chunk)?],
            ))
            .await
            .map_err(db_error("delete delivered rows"))?
            .rows_affected();
    }
    Ok(deleted)
}

/// Ends a round's transaction: dead letters and backoffs of the owned
/// shards, then the commit.
pub(crate) async fn finish_round<T: ConnectionTrait + sea_orm::TransactionSession>(
    txn: T,
    backend: DbBackend,
    queries: &Queries,
    batch: &CommitBatch,
    owned_shards: &[&ShardCommit],
    mut outcome: CommitOutcome,
) -> Result<CommitOutcome, StoreError> {
    for shard in owned_shards {
        outcome.dead_lettered += move_dead_letters(&txn, backend, queries, batch, shard).await?;
        apply_backoff(&txn, backend, queries, batch, shard).await?;
    }
    sea_orm::TransactionSession::commit(txn)
        .await
        .map_err(db_error("commit a drain round"))?;
    Ok(outcome)
}

/// Moves a shard's dead-lettered groups aside, then deletes them from the
/// outbox.
pub(crate) async fn move_dead_letters<Db: ConnectionTrait>(
    txn: &Db,
    backend: DbBackend,
    queries: &Queries,
    batch: &CommitBatch,
    shard: &ShardCommit,
) -> Result<u64, StoreError> {
    let mut moved = 0;
    if !shard.dead_letters.is_empty() {
        // The shard gave up on a group: its failure count starts over.
        txn.execute_raw(statement(
            backend,
            "UPDATE outbox_shard_claim SET attempts = 0, last_backoff_ms = NULL \
             WHERE kind = $1 AND token = $2 AND region_name = $3 AND shard_scope = $4 \
             AND shard_identifier = $5",
            vec![
                Value::from(batch.kind.as_i16()),
                Value::from(batch.token),
                Value::from(shard.shard.region_name().unwrap_or("").to_owned()),
                Value::from(shard.shard.scope()),
                Value::from(shard.shard.identifier()),
            ],
        ))
        .await
        .map_err(db_error("dead-letter rows"))?;
    }
    for dead in &shard.dead_letters {
        let ids = id_list(backend, &dead.ids)?;
        moved += txn
            .execute_raw(statement(
                backend,
                &queries.dead_letter,
                vec![
                    Value::from(batch.kind.as_i16()),
                    Value::from(dead.error.clone()),
                    time::bind(backend, batch.now),
                    ids.clone(),
                ],
            ))
            .await
            .map_err(db_error("dead-letter rows"))?
            .rows_affected();
        txn.execute_raw(statement(backend, &queries.delete_rows, vec![ids]))
            .await
            .map_err(db_error("dead-letter rows"))?;
    }
    Ok(moved)
}

/// Claims due shards in one statement.
pub(crate) async fn claim_due<Db: ConnectionTrait>(
    db: &Db,
    queries: &Queries,
    request: &ClaimRequest,
) -> Result<Vec<ShardClaim>, StoreError> {
    let values = claim_due_values(db.get_database_backend(), request);
    let rows = match db
        .query_all_raw(statement(
            db.get_database_backend(),
            &queries.claim_due,
            values,
        ))
        .await
    {
        Ok(rows) => rows,
        // Two claimers that locked shards in different orders: one is chosen
        // as the deadlock victim. It simply claims nothing this round.
        Err(error) if error.to_string().contains("deadlock detected") => return Ok(Vec::new()),
        Err(error) => return Err(StoreError::database("claim due shards", error)),
    };
    claims_from_rows(&rows, request)
}

/// Claims one shard if nobody live holds it.
pub(crate) async fn claim_shard<Db: ConnectionTrait>(
    db: &Db,
    queries: &Queries,
    request: &ClaimRequest,
    shard: &ShardKey,
) -> Result<Option<ShardClaim>, StoreError> {
    let values = claim_shard_values(db.get_database_backend(), request, shard);
    let row = db
        .query_one_raw(statement(
            db.get_database_backend(),
            &queries.claim_shard,
            values,
        ))
        .await
        .map_err(db_error("claim a shard"))?;
    row.map(|row| claim_from_row(&row, shard.clone(), request))
        .transpose()
}

/// Due rows scanned per shard asked for when looking for claimable shards.
const CANDIDATE_ROWS_PER_SHARD: usize = 4;

pub(crate) fn claim_due_values(backend: DbBackend, request: &ClaimRequest) -> Vec<Value> {
    vec![
        time::bind(backend, request.now),
        Value::from(request.up_to_id.unwrap_or(i64::MAX)),
        Value::from(request.kind.as_i16()),
        Value::from(request.limit.min(i64::MAX as usize) as i64),
        Value::from(request.token),
        Value::from(request.owner.clone()),
        time::bind(backend, request.lease_until),
        Value::from(
            request
                .limit
                .saturating_mul(CANDIDATE_ROWS_PER_SHARD)
                .min(i64::MAX as usize) as i64,
        ),
    ]
}

pub(crate) fn claims_from_rows(
    rows: &[sea_orm::QueryResult],
    request: &ClaimRequest,
) -> Result<Vec<ShardClaim>, StoreError> {
    rows.iter()
        .map(|row| {
            let op = db_error("read a claim");
            let region: String = row.try_get("", "region_name").map_err(&op)?;
            let scope: i32 = row.try_get("", "shard_scope").map_err(&op)?;
            let identifier: i64 = row.try_get("", "shard_identifier").map_err(&op)?;
            let shard = ShardKey::from_raw(request.kind, scope, identifier, Some(region));
            claim_from_row(row, shard, request)
        })
        .collect()
}

pub(crate) fn claim_shard_values(
    backend: DbBackend,
    request: &ClaimRequest,
    shard: &ShardKey,
) -> Vec<Value> {
    vec![
        Value::from(request.kind.as_i16()),
        Value::from(shard.region_name().unwrap_or("").to_owned()),
        Value::from(shard.scope()),
        Value::from(shard.identifier()),
        Value::from(request.token),
        Value::from(request.owner.clone()),
        time::bind(backend, request.lease_until),
        time::bind(backend, request.now),
    ]
}

/// Decodes the common columns of an outbox row.
pub(crate) fn row_from_result(
    row: &sea_orm::QueryResult,
    backend: DbBackend,
    shard: ShardKey,
) -> Result<StoredRow, StoreError> {
    let op = db_error("read outbox rows");
    Ok(StoredRow {
        id: row.try_get("", "id").map_err(&op)?,
        shard,
        category: row.try_get("", "category").map_err(&op)?,
        object_identifier: row.try_get("", "object_identifier").map_err(&op)?,
        payload: row.try_get("", "payload").map_err(&op)?,
        scheduled_from: time::get(row, backend, "scheduled_from")?,
        scheduled_for: time::get(row, backend, "scheduled_for")?,
        date_added: time::get(row, backend, "date_added")?,
    })
}

/// Renews this round's live claims, returning the shards still owned.
pub(crate) async fn fence<Db: ConnectionTrait>(
    txn: &Db,
    backend: DbBackend,
    queries: &Queries,
    batch: &CommitBatch,
) -> Result<HashSet<ShardKey>, StoreError> {
    let rows = txn
        .query_all_raw(statement(
            backend,
            &queries.fence,
            vec![
                Value::from(batch.kind.as_i16()),
                Value::from(batch.token),
                time::bind(backend, batch.now),
                time::bind(backend, batch.renew_until),
            ],
        ))
        .await
        .map_err(db_error("check claims"))?;
    rows.iter()
        .map(|row| {
            let op = db_error("check claims");
            let region: String = row.try_get("", "region_name").map_err(&op)?;
            let scope: i32 = row.try_get("", "shard_scope").map_err(&op)?;
            let identifier: i64 = row.try_get("", "shard_identifier").map_err(&op)?;
            Ok(ShardKey::from_raw(
                batch.kind,
                scope,
                identifier,
                Some(region),
            ))
        })
        .collect()
}

/// Splits a batch into the owned shards and an outcome listing the lost ones.
pub(crate) fn split_owned<'b>(
    batch: &'b CommitBatch,
    owned: &HashSet<ShardKey>,
) -> (CommitOutcome, Vec<&'b ShardCommit>) {
    let mut outcome = CommitOutcome::default();
    let mut kept = Vec::with_capacity(batch.shards.len());
    for shard in &batch.shards {
        if owned.contains(&shard.shard) {
            kept.push(shard);
        } else {
            outcome.lost.push(shard.shard.clone());
        }
    }
    (outcome, kept)
}

/// Turns a failed shard's claim into its backoff and reschedules its rows.
pub(crate) async fn apply_backoff<Db: ConnectionTrait>(
    txn: &Db,
    backend: DbBackend,
    queries: &Queries,
    batch: &CommitBatch,
    shard: &ShardCommit,
) -> Result<(), StoreError> {
    let ShardEnd::Backoff {
        retry_at,
        delay,
        error,
        attempts,
    } = &shard.end
    else {
        return Ok(());
    };
    let region = shard.shard.region_name().unwrap_or("").to_owned();
    let delay_ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
    let mut error = error.clone();
    if error.len() > 2000 {
        let mut cut = 2000;
        while !error.is_char_boundary(cut) {
            cut -= 1;
        }
        error.truncate(cut);
    }
    txn.execute_raw(statement(
        backend,
        &queries.backoff_claim,
        vec![
            Value::from(batch.kind.as_i16()),
            Value::from(batch.token),
            Value::from(region.clone()),
            Value::from(shard.shard.scope()),
            Value::from(shard.shard.identifier()),
            time::bind(backend, *retry_at),
            Value::from(delay_ms),
            Value::from(error),
            Value::from((*attempts).min(i32::MAX as u32) as i32),
        ],
    ))
    .await
    .map_err(db_error("record a shard's backoff"))?;
    let mut values = vec![
        Value::from(shard.shard.scope()),
        Value::from(shard.shard.identifier()),
        time::bind(backend, *retry_at),
        time::bind(backend, batch.now),
    ];
    if batch.kind == OutboxKind::Control {
        values.push(Value::from(region));
    }
    txn.execute_raw(statement(backend, &queries.backoff_rows, values))
        .await
        .map_err(db_error("reschedule a shard"))?;
    Ok(())
}
