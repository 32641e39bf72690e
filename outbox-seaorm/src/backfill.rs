//! Backfill: outbox rows for rows that already exist, when a model starts
//! replicating or its replication changes (Sentry's `backfill_outboxes`, with
//! its state in the database instead of Redis).
//!
//! Each replicated model has a coded `REPLICATION_VERSION` (default 1). A
//! backfill advances a table only up to its *target*: the smaller of the coded
//! version and a runtime option stored in `outbox_option` under
//! `outbox_replication.<table>.replication_version` (unset: the table does not
//! advance), or the coded version itself in *force* mode (self-hosted
//! upgrades).
//!
//! A cursor `(lower_bound_id, version)` per table in `outbox_backfill_cursor`
//! says where it is: a version above the target is done; below, it restarts
//! at id 0 with the target version; equal, it resumes. Each batch writes the
//! outbox rows of the rows with ids in `[low, up]` (`up` chosen so that the
//! batch holds at most `batch_size` rows; deferred: the background
//! drain delivers them) and moves the cursor, in one transaction, so a crash
//! loses no progress and repeats at most one batch (receivers are
//! idempotent). After the last batch the cursor becomes
//! `(0, version + 1)`: done until the next version.
//!
//! [`Backfill::tick`] spends a budget of rows per minute (default 10,000)
//! minus the outbox rows already pending, across the registered models in
//! order; `outbox-axum`'s worker runs it once a minute when given one.
//!
//! ```
//! # outbox_core::registry! {
//! #     OrganizationScope = 0 (shard_field = "organization_id", owner_table = "organization") {
//! #         OrganizationUpdate = 1,
//! #     }
//! # }
//! # mod organization {
//! #     use outbox_core::HandlerError;
//! #     use outbox_seaorm::replication::{RegionReplication, ReplicatedRegionModel};
//! #     use sea_orm::entity::prelude::*;
//! #     #[derive(Clone, Debug, PartialEq, DeriveEntityModel, ReplicatedRegionModel)]
//! #     #[sea_orm(table_name = "organization")]
//! #     #[outbox(category = crate::OutboxCategory::OrganizationUpdate, replication_version = 2, active_model_behavior)]
//! #     pub struct Model { #[sea_orm(primary_key)] pub id: i64, pub slug: String }
//! #     #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
//! #     pub enum Relation {}
//! #     #[async_trait::async_trait]
//! #     impl RegionReplication for Model {
//! #         async fn handle_async_replication(&self, _: &(), _: i64) -> Result<(), HandlerError> { Ok(()) }
//! #         async fn handle_async_deletion(_: &(), _: i64, _: i64, _: Option<serde_json::Value>) -> Result<(), HandlerError> { Ok(()) }
//! #     }
//! # }
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # use sea_orm::{ConnectionTrait, EntityTrait, Schema, Set};
//! # use sea_orm_migration::MigratorTrait;
//! # let db = sea_orm::Database::connect("sqlite::memory:").await?; // one connection
//! # outbox_migrations::OutboxMigrator::up(&db, None).await?;
//! # db.execute(&Schema::new(db.get_database_backend()).create_table_from_entity(organization::Entity)).await?;
//! # organization::Entity::insert_many((1..=5).map(|id| organization::ActiveModel { id: Set(id), slug: Set(format!("org-{id}")) }))
//! #     .exec(&db)
//! #     .await?; // rows from before the model replicated: no outbox rows
//! use outbox_seaorm::backfill::{set_target_version, Backfill};
//!
//! // `organization::Model` has `#[outbox(replication_version = 2)]`.
//! let backfill = Backfill::new().model::<organization::Model>();
//! set_target_version(&db, "organization", 2).await?; // let version 2 roll out
//! let report = backfill.tick(&db).await?;
//! assert_eq!(report.backfilled, 5); // the outbox rows of the 5 organizations
//!
//! let status = &backfill.status(&db).await?[0];
//! assert!(status.done && status.rows_remaining == 0);
//! assert_eq!(backfill.tick(&db).await?.backfilled, 0); // done until the next version
//! # Ok(()) }
//! ```

use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DbBackend, DbErr, EntityName, EntityTrait,
    Iterable, PrimaryKeyToColumn, QueryFilter, QueryOrder, QuerySelect, Statement, Value,
};

use crate::replication::ReplicatedModel;

/// Default rows backfilled per minute, before pending outbox rows are
/// subtracted: 10,000.
pub const DEFAULT_ROWS_PER_MINUTE: u64 = 10_000;
/// Default ids per batch (one transaction): 500.
pub const DEFAULT_BATCH_SIZE: u64 = 500;
/// Metric (gauge): a table's cursor lower bound (tag: table).
pub const METRIC_LOW_BOUND: &str = "backfill_outboxes.low_bound";
/// Metric (counter): rows backfilled (tag: table).
pub const METRIC_BACKFILLED: &str = "backfill_outboxes.backfilled";

/// The option key holding a table's target replication version.
pub fn option_key(table: &str) -> String {
    format!("outbox_replication.{table}.replication_version")
}

/// Sets a runtime option.
///
/// # Errors
///
/// The database's error.
pub async fn set_option<C: ConnectionTrait>(db: &C, key: &str, value: &str) -> Result<(), DbErr> {
    let backend = db.get_database_backend();
    db.execute_raw(Statement::from_sql_and_values(
        backend,
        "INSERT INTO outbox_option (key, value) VALUES ($1, $2) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [key.into(), value.into()],
    ))
    .await?;
    Ok(())
}

/// Reads a runtime option.
///
/// # Errors
///
/// The database's error.
pub async fn get_option<C: ConnectionTrait>(db: &C, key: &str) -> Result<Option<String>, DbErr> {
    let backend = db.get_database_backend();
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            backend,
            "SELECT value FROM outbox_option WHERE key = $1",
            [key.into()],
        ))
        .await?;
    row.map(|row| row.try_get("", "value")).transpose()
}

/// Lets `table`'s backfill advance up to `version` (capped by the coded
/// version).
///
/// # Errors
///
/// The database's error.
pub async fn set_target_version<C: ConnectionTrait>(
    db: &C,
    table: &str,
    version: u32,
) -> Result<(), DbErr> {
    set_option(db, &option_key(table), &version.to_string()).await
}

/// One replicated table, as the backfill sees it.
#[async_trait]
pub trait BackfillTarget: Send + Sync {
    /// The table name (cursor and option key).
    fn table(&self) -> &'static str;
    /// The coded replication version.
    fn coded_version(&self) -> u32;
    /// The highest primary key, if the table has rows, read in the batch's
    /// transaction (which holds a connection: reading on the pool instead
    /// would wait forever for a second one on a pool of one).
    async fn max_id(&self, txn: &sea_orm::DatabaseTransaction) -> Result<Option<i64>, DbErr>;
    /// Rows with a primary key at or above `low`.
    async fn count_from(&self, db: &DatabaseConnection, low: i64) -> Result<u64, DbErr>;
    /// Writes the outbox rows of the next `limit` rows with ids from `low` on
    /// `txn`; returns how many rows it covered and the highest id among them
    /// (the batch covers the ids `[low, that id]`).
    async fn write_batch(
        &self,
        txn: &sea_orm::DatabaseTransaction,
        low: i64,
        limit: u64,
    ) -> Result<(u64, Option<i64>), DbErr>;
}

/// The [`BackfillTarget`] of a replicated model.
#[derive(Debug, Default)]
pub struct ModelBackfill<M>(PhantomData<fn() -> M>);

fn table_of<M: ReplicatedModel>() -> &'static str {
    M::Table::default().table_name()
}

fn key_column<M: ReplicatedModel>() -> Option<<M::Table as EntityTrait>::Column> {
    <<M::Table as EntityTrait>::PrimaryKey as Iterable>::iter()
        .next()
        .map(PrimaryKeyToColumn::into_column)
}

fn key_name<M: ReplicatedModel>() -> Result<&'static str, DbErr> {
    key_column::<M>()
        .map(|column| sea_orm::IdenStatic::as_str(&column))
        .ok_or_else(|| DbErr::Custom(format!("{} has no primary key", table_of::<M>())))
}

#[async_trait]
impl<M: ReplicatedModel> BackfillTarget for ModelBackfill<M> {
    fn table(&self) -> &'static str {
        table_of::<M>()
    }

    fn coded_version(&self) -> u32 {
        M::REPLICATION_VERSION
    }

    async fn max_id(&self, db: &sea_orm::DatabaseTransaction) -> Result<Option<i64>, DbErr> {
        let sql = format!(
            "SELECT max(\"{}\") AS max_id FROM \"{}\"",
            key_name::<M>()?,
            table_of::<M>()
        );
        let row = db
            .query_one_raw(Statement::from_string(db.get_database_backend(), sql))
            .await?;
        match row {
            Some(row) => row.try_get("", "max_id"),
            None => Ok(None),
        }
    }

    async fn count_from(&self, db: &DatabaseConnection, low: i64) -> Result<u64, DbErr> {
        let sql = format!(
            "SELECT count(*) AS n FROM \"{}\" WHERE \"{}\" >= $1",
            table_of::<M>(),
            key_name::<M>()?
        );
        let row = db
            .query_one_raw(Statement::from_sql_and_values(
                db.get_database_backend(),
                sql,
                [low.into()],
            ))
            .await?;
        let count: i64 = match row {
            Some(row) => row.try_get("", "n")?,
            None => 0,
        };
        Ok(count.max(0) as u64)
    }

    async fn write_batch(
        &self,
        txn: &sea_orm::DatabaseTransaction,
        low: i64,
        limit: u64,
    ) -> Result<(u64, Option<i64>), DbErr> {
        let column = key_column::<M>()
            .ok_or_else(|| DbErr::Custom(format!("{} has no primary key", table_of::<M>())))?;
        let models = M::Table::find()
            .filter(column.gte(low))
            .order_by_asc(column)
            .limit(limit)
            .all(txn)
            .await?;
        // flush = false: the background drain delivers backfilled rows.
        outbox_core::context::deferred(M::write_outboxes(txn, &models)).await?;
        let last = models.last().map(ReplicatedModel::object_identifier);
        Ok((models.len() as u64, last))
    }
}

/// Where a table's backfill stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackfillStatus {
    /// The table.
    pub table: &'static str,
    /// The cursor's lower bound (0 when done or not started).
    pub lower_bound_id: i64,
    /// The cursor's version, if a cursor exists.
    pub cursor_version: Option<u32>,
    /// The coded replication version.
    pub coded_version: u32,
    /// The version the backfill may advance to now (`None`: option unset).
    pub target_version: Option<u32>,
    /// Whether the backfill of the target version is complete.
    pub done: bool,
    /// Rows still to backfill for the target version.
    pub rows_remaining: u64,
}

/// What a tick or a run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackfillReport {
    /// The budget of rows this tick had (rows per minute minus pending outbox
    /// rows); `u64::MAX` for an unbudgeted run.
    pub budget: u64,
    /// Rows backfilled, in all.
    pub backfilled: u64,
    /// Rows backfilled per table, in registration order.
    pub tables: Vec<(&'static str, u64)>,
}

enum Step {
    /// Nothing to do for this table now.
    Idle,
    /// A batch was written.
    Batch { rows: u64, done: bool },
}

/// Backfills of registered replicated models.
///
/// Cheap to clone (the registered tables are shared): `backfill.clone().force(true)`
/// is the same backfill in force mode.
#[derive(Clone)]
pub struct Backfill {
    targets: Vec<Arc<dyn BackfillTarget>>,
    rows_per_minute: u64,
    batch_size: u64,
    force: bool,
}

impl std::fmt::Debug for Backfill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backfill")
            .field(
                "tables",
                &self.targets.iter().map(|t| t.table()).collect::<Vec<_>>(),
            )
            .field("rows_per_minute", &self.rows_per_minute)
            .field("batch_size", &self.batch_size)
            .field("force", &self.force)
            .finish()
    }
}

impl Default for Backfill {
    fn default() -> Self {
        Self::new()
    }
}

impl Backfill {
    /// No tables yet; defaults: 10,000 rows per minute, batches of 500 ids,
    /// option-gated.
    pub fn new() -> Self {
        Self {
            targets: Vec::new(),
            rows_per_minute: DEFAULT_ROWS_PER_MINUTE,
            batch_size: DEFAULT_BATCH_SIZE,
            force: false,
        }
    }

    /// Registers a replicated model (backfilled in registration order).
    pub fn model<M: ReplicatedModel>(mut self) -> Self {
        self.targets.push(Arc::new(ModelBackfill::<M>(PhantomData)));
        self
    }

    /// Rows per minute, shared by all tables, minus pending outbox rows.
    /// Default: 10,000.
    pub fn rows_per_minute(mut self, rows: u64) -> Self {
        self.rows_per_minute = rows;
        self
    }

    /// Ids per batch (one transaction, at least 1). Default: 500.
    pub fn batch_size(mut self, ids: u64) -> Self {
        self.batch_size = ids.max(1);
        self
    }

    /// Force mode: target the coded versions, ignoring the options (a
    /// self-hosted upgrade). Default: off.
    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// Whether it runs in force mode (see [`force`](Self::force)).
    pub fn is_forced(&self) -> bool {
        self.force
    }

    /// The tables, in order.
    pub fn tables(&self) -> Vec<&'static str> {
        self.targets.iter().map(|target| target.table()).collect()
    }

    /// One budgeted pass: at most `rows_per_minute` minus the pending outbox
    /// rows, over the tables in order.
    ///
    /// # Errors
    ///
    /// The database's error; batches committed before it stay.
    pub async fn tick(&self, db: &DatabaseConnection) -> Result<BackfillReport, DbErr> {
        let pending = pending_outbox_rows(db).await?;
        let budget = self.rows_per_minute.saturating_sub(pending);
        self.spend(db, budget, &mut |_, _| {}).await
    }

    /// Backfills every table to its target, without budget; `progress` gets
    /// each table and its rows so far after every batch.
    ///
    /// # Errors
    ///
    /// The database's error; batches committed before it stay.
    pub async fn run_to_completion(
        &self,
        db: &DatabaseConnection,
        mut progress: impl FnMut(&'static str, u64) + Send,
    ) -> Result<BackfillReport, DbErr> {
        self.spend(db, u64::MAX, &mut progress).await
    }

    async fn spend(
        &self,
        db: &DatabaseConnection,
        budget: u64,
        progress: &mut (dyn FnMut(&'static str, u64) + Send),
    ) -> Result<BackfillReport, DbErr> {
        let mut report = BackfillReport {
            budget,
            ..BackfillReport::default()
        };
        let mut left = budget;
        for target in &self.targets {
            let mut rows_here = 0;
            while left > 0 {
                match self
                    .step(db, target.as_ref(), left.min(self.batch_size))
                    .await?
                {
                    Step::Idle => break,
                    Step::Batch { rows, done } => {
                        rows_here += rows;
                        left = left.saturating_sub(rows);
                        progress(target.table(), rows_here);
                        if done {
                            break;
                        }
                    }
                }
            }
            report.backfilled += rows_here;
            report.tables.push((target.table(), rows_here));
        }
        Ok(report)
    }

    async fn target_version(
        &self,
        db: &impl ConnectionTrait,
        target: &dyn BackfillTarget,
    ) -> Result<Option<u32>, DbErr> {
        if self.force {
            return Ok(Some(target.coded_version()));
        }
        let option = get_option(db, &option_key(target.table())).await?;
        Ok(option
            .and_then(|value| value.trim().parse::<u32>().ok())
            .map(|version| version.min(target.coded_version())))
    }

    /// One batch of one table, in one transaction.
    async fn step(
        &self,
        db: &DatabaseConnection,
        target: &dyn BackfillTarget,
        span: u64,
    ) -> Result<Step, DbErr> {
        let txn = crate::begin_write(db).await?;
        let Some(goal) = self.target_version(&txn, target).await? else {
            return Ok(Step::Idle);
        };
        let (low, version) = match read_cursor(&txn, target.table()).await? {
            None => (0, goal),
            Some((_, version)) if version > goal => return Ok(Step::Idle),
            Some((_, version)) if version < goal => (0, goal),
            Some(cursor) => cursor,
        };
        let Some(max_id) = target.max_id(&txn).await? else {
            write_cursor(&txn, target.table(), 0, version + 1).await?;
            txn.commit().await?;
            return Ok(Step::Batch {
                rows: 0,
                done: true,
            });
        };
        let (rows, last) = target.write_batch(&txn, low, span).await?;
        let up = last.unwrap_or(max_id);
        let done = up >= max_id || rows < span;
        let (next_low, next_version) = if done {
            (0, version + 1)
        } else {
            (up + 1, version)
        };
        write_cursor(&txn, target.table(), next_low, next_version).await?;
        txn.commit().await?;
        metrics::gauge!(METRIC_LOW_BOUND, "table" => target.table()).set(next_low as f64);
        metrics::counter!(METRIC_BACKFILLED, "table" => target.table()).increment(rows);
        tracing::info!(
            table = target.table(),
            low,
            up,
            rows,
            version,
            done,
            "outbox backfill batch"
        );
        Ok(Step::Batch { rows, done })
    }

    /// Per table: cursor, target version, rows remaining.
    ///
    /// # Errors
    ///
    /// The database's error.
    pub async fn status(&self, db: &DatabaseConnection) -> Result<Vec<BackfillStatus>, DbErr> {
        let mut statuses = Vec::with_capacity(self.targets.len());
        for target in &self.targets {
            let goal = self.target_version(db, target.as_ref()).await?;
            let cursor = read_cursor(db, target.table()).await?;
            let (done, from) = match (goal, cursor) {
                (None, _) => (false, None),
                (Some(goal), Some((_, version))) if version > goal => (true, None),
                (Some(goal), Some((low, version))) if version == goal => (false, Some(low)),
                (Some(_), _) => (false, Some(0)),
            };
            let rows_remaining = match from {
                Some(low) => target.count_from(db, low).await?,
                None => 0,
            };
            statuses.push(BackfillStatus {
                table: target.table(),
                lower_bound_id: cursor.map_or(0, |(low, _)| low),
                cursor_version: cursor.map(|(_, version)| version),
                coded_version: target.coded_version(),
                target_version: goal,
                done,
                rows_remaining,
            });
        }
        Ok(statuses)
    }
}

async fn read_cursor(db: &impl ConnectionTrait, table: &str) -> Result<Option<(i64, u32)>, DbErr> {
    let backend = db.get_database_backend();
    let lock = if backend == DbBackend::Postgres {
        " FOR UPDATE"
    } else {
        ""
    };
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            backend,
            format!("SELECT lower_bound_id, version FROM outbox_backfill_cursor WHERE table_name = $1{lock}"),
            [Value::from(table)],
        ))
        .await?;
    match row {
        Some(row) => {
            let low: i64 = row.try_get("", "lower_bound_id")?;
            let version: i32 = row.try_get("", "version")?;
            Ok(Some((low, version.max(0) as u32)))
        }
        None => Ok(None),
    }
}

async fn write_cursor(
    db: &impl ConnectionTrait,
    table: &str,
    low: i64,
    version: u32,
) -> Result<(), DbErr> {
    let backend = db.get_database_backend();
    db.execute_raw(Statement::from_sql_and_values(
        backend,
        "INSERT INTO outbox_backfill_cursor (table_name, lower_bound_id, version) VALUES ($1, $2, $3) \
         ON CONFLICT (table_name) DO UPDATE SET lower_bound_id = excluded.lower_bound_id, version = excluded.version",
        [Value::from(table), low.into(), (version.min(i32::MAX as u32) as i32).into()],
    ))
    .await?;
    Ok(())
}

/// Outbox rows pending in both tables.
async fn pending_outbox_rows(db: &impl ConnectionTrait) -> Result<u64, DbErr> {
    let backend = db.get_database_backend();
    let row = db
        .query_one_raw(Statement::from_string(
            backend,
            "SELECT (SELECT count(*) FROM region_outbox) + (SELECT count(*) FROM control_outbox) AS n",
        ))
        .await?;
    let count: i64 = match row {
        Some(row) => row.try_get("", "n")?,
        None => 0,
    };
    Ok(count.max(0) as u64)
}
