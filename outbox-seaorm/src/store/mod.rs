//! The PostgreSQL and SQLite [`Store`] behind one type.
//!
//! [`SeaOrmStore`] wraps a SeaORM `DatabaseConnection` and dispatches to the
//! backend module of its database: [`postgres`] batches across shards with
//! arrays and `LATERAL`, [`sqlite`] relies on SQLite's single writer and runs
//! cheap per-shard statements. Both expose the same functions; the SQL lives in
//! `queries/<backend>/<name>.sql`.

pub mod postgres;
pub mod sqlite;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement, Value};

use outbox_core::{
    ClaimRequest, CommitBatch, CommitOutcome, OutboxKind, ShardClaim, ShardDepth, ShardRead, Store,
    StoreError, StoredRow,
};

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
    pub(crate) delete_rows: String,
    pub(crate) release_all: String,
    /// PostgreSQL only: fence, release and delete a finished round at once.
    pub(crate) release_all_and_delete: String,
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
        let render = match backend {
            DbBackend::Postgres => postgres::queries,
            DbBackend::Sqlite => sqlite::queries,
            other => return Err(UnsupportedBackend(other)),
        };
        Ok(Self {
            db,
            backend,
            queries: std::sync::Arc::new([render(OutboxKind::Region), render(OutboxKind::Control)]),
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
        match self.backend {
            DbBackend::Postgres => postgres::claim_due(&self.db, queries, request).await,
            _ => sqlite::claim_due(&self.db, queries, request).await,
        }
    }

    async fn claim_shard(
        &self,
        request: &ClaimRequest,
        shard: &outbox_core::ShardKey,
    ) -> Result<Option<ShardClaim>, StoreError> {
        let queries = self.queries(request.kind);
        match self.backend {
            DbBackend::Postgres => postgres::claim_shard(&self.db, queries, request, shard).await,
            _ => sqlite::claim_shard(&self.db, queries, request, shard).await,
        }
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

/// Statements shared by both backends.
pub(crate) fn common_queries(kind: OutboxKind) -> [String; 3] {
    let table = table(kind);
    [
        format!("SELECT count(*) AS n FROM {table}"),
        format!("SELECT min(date_added) AS oldest FROM {table}"),
        format!("SELECT max(id) AS max_id FROM {table}"),
    ]
}
