//! Where a synchronous flush claims: in the writing transaction before its
//! commit, or on a connection after it.

use async_trait::async_trait;
use sea_orm::{ConnectionTrait, DbBackend};

use outbox_core::store::{ClaimBeforeCommit, ClaimRequest, ShardClaim};
use outbox_core::{ShardKey, StoreError};

/// Where the synchronous flush claims the shards a transaction wrote
/// ([`PreparedFlush::claim`](outbox_core::PreparedFlush::claim)): in that
/// transaction, just before its commit (`ClaimOn(&txn)`), or after the
/// commit on a connection (`ClaimOn(&db)`). One statement on PostgreSQL
/// that never waits for another worker or transaction.
///
/// ```
/// # outbox_core::registry! {
/// #     OrganizationScope = 0 (shard_field = "organization_id") { OrganizationUpdate = 1 }
/// # }
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # use sea_orm_migration::MigratorTrait;
/// # let db = sea_orm::Database::connect("sqlite::memory:").await?;
/// # outbox_migrations::OutboxMigrator::up(&db, None).await?;
/// use outbox_core::{Drainer, Receivers};
/// use outbox_seaorm::{write_region, ClaimOn, ObjectId, OutboxMessage, SeaOrmStore, ShardId};
///
/// let receivers = Receivers::new().discard(OutboxCategory::OrganizationUpdate);
/// let drainer = Drainer::new(SeaOrmStore::new(db.clone())?, receivers);
///
/// let txn = outbox_seaorm::begin_write(&db).await?;
/// let message = OutboxMessage::new(OutboxCategory::OrganizationUpdate, ShardId(7), ObjectId(7));
/// let row = write_region(&txn, message).await?;
/// let mut flush = drainer.prepare_flush([(row.shard, row.id)]);
/// flush.claim(&ClaimOn(&txn)).await?; // the last statement before COMMIT
/// txn.commit().await?;
/// let outcome = flush.deliver().await; // delivered; nothing sent to the database
/// assert_eq!(outcome.report.deliveries, 1);
/// # drainer.settled().await;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ClaimOn<'a, C>(pub &'a C);

#[async_trait]
impl<C: ConnectionTrait + Send + Sync> ClaimBeforeCommit for ClaimOn<'_, C> {
    async fn claim_before_commit(
        &self,
        request: &ClaimRequest,
        shards: &[(ShardKey, i64)],
    ) -> Result<Vec<ShardClaim>, StoreError> {
        match self.0.get_database_backend() {
            DbBackend::Postgres => {
                crate::store::postgres::claim_before_commit(self.0, request, shards).await
            }
            DbBackend::Sqlite => {
                crate::store::sqlite::claim_before_commit(self.0, request, shards).await
            }
            other => Err(StoreError::database(
                "claim shards before the commit",
                crate::UnsupportedBackend(other),
            )),
        }
    }
}
