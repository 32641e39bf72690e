//! The outbox stores: [`PgStore`] for PostgreSQL and [`SqliteStore`] for
//! SQLite, each self-contained (its own SQL, one file per statement, under
//! `postgres/sql/` and `sqlite/sql/`), sharing one codec for shard keys,
//! rows and backoff states. [`SeaOrmStore`] picks one for a connection.
//!
//! Both implement the drain's hot path ([`DrainStore`]) and administration
//! ([`StoreAdmin`]), and both pass `outbox_core`'s conformance suite (one test
//! file per rule). How they claim:
//!
//! - Shards are hashed into 1,024 buckets per outbox kind
//!   ([`ShardKey::bucket`](outbox_core::ShardKey::bucket)); a worker leases
//!   buckets, a few at a time, in `outbox_claim_bucket` (unlogged on
//!   PostgreSQL). A claim costs an update of a few existing rows, not a row
//!   per shard.
//! - A failing shard's backoff lives in `outbox_shard_state`, written only
//!   when a delivery fails or a failing shard recovers; its rows are
//!   rescheduled to its next attempt.
//! - Nothing is session-bound: every statement goes through the pool, which
//!   may sit behind a transaction-pooling proxy.

mod audit;
mod claim_on;
pub(crate) mod codec;
mod controls;
mod head;
mod history;
pub mod postgres;
pub(crate) mod render;
mod snapshot;
pub mod sqlite;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::{DatabaseConnection, DbBackend};

use outbox_core::store::{
    ClaimRequest, CommitBatch, CommitOutcome, DrainStore, DueClaim, ShardClaim, StoreAdmin,
};
use outbox_core::{DeadLetterRow, FailingShard, OutboxKind, ShardDepth, ShardKey, StoreError};

pub use claim_on::ClaimOn;
pub use postgres::PgStore;
pub use sqlite::SqliteStore;

/// The database is neither PostgreSQL nor SQLite.
#[derive(Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the outbox supports PostgreSQL and SQLite; this connection is {0:?}")]
pub struct UnsupportedBackend(pub DbBackend);

crate::error_debug::debug_with_message!(UnsupportedBackend);

/// The store for a SeaORM connection: [`PgStore`] or [`SqliteStore`], chosen
/// by its backend. Cheap to clone (the connection is a pool).
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # use sea_orm_migration::MigratorTrait;
/// let db = sea_orm::Database::connect("sqlite::memory:").await?;
/// outbox_migrations::OutboxMigrator::up(&db, None).await?;
/// let store = outbox_seaorm::SeaOrmStore::new(db)?;
/// assert!(matches!(store, outbox_seaorm::SeaOrmStore::Sqlite(_)));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub enum SeaOrmStore {
    /// PostgreSQL.
    Postgres(PgStore),
    /// SQLite.
    Sqlite(SqliteStore),
}

impl SeaOrmStore {
    /// The store for `db`. The outbox migrations must have run.
    ///
    /// # Errors
    ///
    /// [`UnsupportedBackend`] for a database other than PostgreSQL or SQLite.
    pub fn new(db: DatabaseConnection) -> Result<Self, UnsupportedBackend> {
        match db.get_database_backend() {
            DbBackend::Postgres => PgStore::new(db).map(Self::Postgres),
            DbBackend::Sqlite => SqliteStore::new(db).map(Self::Sqlite),
            other => Err(UnsupportedBackend(other)),
        }
    }

    /// The connection.
    pub fn connection(&self) -> &DatabaseConnection {
        match self {
            Self::Postgres(store) => store.connection(),
            Self::Sqlite(store) => store.connection(),
        }
    }

    fn drain(&self) -> &dyn DrainStore {
        match self {
            Self::Postgres(store) => store,
            Self::Sqlite(store) => store,
        }
    }

    fn admin(&self) -> &dyn StoreAdmin {
        match self {
            Self::Postgres(store) => store,
            Self::Sqlite(store) => store,
        }
    }
}

#[async_trait]
impl DrainStore for SeaOrmStore {
    async fn claim_due(&self, request: &ClaimRequest) -> Result<DueClaim, StoreError> {
        self.drain().claim_due(request).await
    }

    async fn claim_shard(
        &self,
        request: &ClaimRequest,
        shard: &ShardKey,
    ) -> Result<ShardClaim, StoreError> {
        self.drain().claim_shard(request, shard).await
    }

    async fn renew(
        &self,
        kind: OutboxKind,
        token: i64,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        self.drain().renew(kind, token, now, until).await
    }

    async fn commit(&self, batch: &CommitBatch) -> Result<CommitOutcome, StoreError> {
        self.drain().commit(batch).await
    }

    async fn complete(&self, batches: &[CommitBatch]) -> Result<Vec<CommitOutcome>, StoreError> {
        self.drain().complete(batches).await
    }

    async fn expire_claims(
        &self,
        kind: OutboxKind,
        token: i64,
        now: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        self.drain().expire_claims(kind, token, now).await
    }
}

#[async_trait]
impl StoreAdmin for SeaOrmStore {
    async fn pending_count(&self, kind: OutboxKind) -> Result<u64, StoreError> {
        self.admin().pending_count(kind).await
    }

    async fn shard_depths(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<ShardDepth>, StoreError> {
        self.admin().shard_depths(kind, limit).await
    }

    async fn oldest_pending(&self, kind: OutboxKind) -> Result<Option<DateTime<Utc>>, StoreError> {
        self.admin().oldest_pending(kind).await
    }

    async fn max_id(&self, kind: OutboxKind) -> Result<Option<i64>, StoreError> {
        self.admin().max_id(kind).await
    }

    async fn has_due(&self, kind: OutboxKind, now: DateTime<Utc>) -> Result<bool, StoreError> {
        self.admin().has_due(kind, now).await
    }

    async fn failing_shards(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<FailingShard>, StoreError> {
        self.admin().failing_shards(kind, limit).await
    }

    async fn parked_shards(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<FailingShard>, StoreError> {
        self.admin().parked_shards(kind, limit).await
    }

    async fn dead_letters(
        &self,
        kind: OutboxKind,
        limit: usize,
    ) -> Result<Vec<DeadLetterRow>, StoreError> {
        self.admin().dead_letters(kind, limit).await
    }

    async fn replay_dead_letters(&self, kind: OutboxKind, ids: &[i64]) -> Result<u64, StoreError> {
        self.admin().replay_dead_letters(kind, ids).await
    }

    async fn retry_now(
        &self,
        shards: &[ShardKey],
        now: DateTime<Utc>,
    ) -> Result<Vec<ShardKey>, StoreError> {
        self.admin().retry_now(shards, now).await
    }

    async fn discard_dead_letters(&self, kind: OutboxKind, ids: &[i64]) -> Result<u64, StoreError> {
        self.admin().discard_dead_letters(kind, ids).await
    }

    async fn scope_depths(
        &self,
        kind: OutboxKind,
    ) -> Result<Vec<outbox_core::ScopeDepth>, StoreError> {
        self.admin().scope_depths(kind).await
    }

    async fn dead_letter_count(&self, kind: OutboxKind) -> Result<u64, StoreError> {
        self.admin().dead_letter_count(kind).await
    }

    async fn snapshot(
        &self,
        kind: OutboxKind,
        limit: usize,
        cap: u64,
    ) -> Result<outbox_core::store::AdminSnapshot, StoreError> {
        self.admin().snapshot(kind, limit, cap).await
    }

    async fn read_backlog(
        &self,
        kind: OutboxKind,
        cap: u64,
    ) -> Result<outbox_core::store::BacklogReading, StoreError> {
        self.admin().read_backlog(kind, cap).await
    }

    async fn table_health(
        &self,
        kind: OutboxKind,
    ) -> Result<outbox_core::store::TableHealth, StoreError> {
        self.admin().table_health(kind).await
    }

    async fn controls(&self) -> Result<Vec<outbox_core::RuntimeControl>, StoreError> {
        self.admin().controls().await
    }

    async fn set_control(&self, control: &outbox_core::RuntimeControl) -> Result<(), StoreError> {
        self.admin().set_control(control).await
    }

    async fn clear_control(&self, target: &outbox_core::ControlTarget) -> Result<bool, StoreError> {
        self.admin().clear_control(target).await
    }

    async fn record_audit(
        &self,
        entry: &outbox_core::audit::AuditEntry,
        keep_after: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        self.admin().record_audit(entry, keep_after).await
    }

    async fn audit_log(
        &self,
        limit: usize,
    ) -> Result<Vec<outbox_core::audit::AuditRecord>, StoreError> {
        self.admin().audit_log(limit).await
    }

    async fn shard_head(
        &self,
        shard: &ShardKey,
        limit: usize,
    ) -> Result<Vec<outbox_core::message::StoredRow>, StoreError> {
        self.admin().shard_head(shard, limit).await
    }

    async fn set_aside(
        &self,
        shard: &ShardKey,
        ids: &[i64],
        error: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<u64>, StoreError> {
        self.admin().set_aside(shard, ids, error, now).await
    }

    async fn record_history(
        &self,
        samples: &[outbox_core::history::Sample],
        keep_after: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        self.admin().record_history(samples, keep_after).await
    }

    async fn history(
        &self,
        kind: outbox_core::OutboxKind,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<outbox_core::history::Sample>, StoreError> {
        self.admin().history(kind, since).await
    }
}
