//! The conformance suite of `outbox_core` (one file per rule of the outbox)
//! against real PostgreSQL and SQLite, through the write API.

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use outbox_core::store::{ClaimBeforeCommit, ClaimRequest, ShardClaim};
use outbox_core::{OutboxKind, ShardKey, StoreError};
use outbox_migrations::OutboxRingMigrator;
use outbox_seaorm::{
    write_control, write_region, ClaimOn, ObjectId, OutboxMessage, SeaOrmStore, ShardId,
};
use outbox_testing::conformance::{Backend, NewRow, WriterTransaction};
use outbox_testing::database::TestDatabase;
use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend};
use sea_orm_migration::MigratorTrait;

/// Fresh databases of one backend, kept until the test ends (dropped then,
/// unless it failed).
#[derive(Clone)]
struct Databases {
    backend: DbBackend,
    /// PostgreSQL with the partition ring, ids starting just before the
    /// ring wraps from its last partition to its first.
    ring: bool,
    made: Arc<Mutex<Vec<TestDatabase>>>,
}

impl Databases {
    fn new(backend: DbBackend) -> Self {
        Self {
            backend,
            ring: false,
            made: Arc::default(),
        }
    }

    fn ring() -> Self {
        Self {
            ring: true,
            ..Self::new(DbBackend::Postgres)
        }
    }

    fn made(&self, store: &SeaOrmStore) -> TestDatabase {
        let made = self.made.lock().unwrap();
        let url = match store.connection().get_database_backend() {
            DbBackend::Postgres => store
                .connection()
                .get_postgres_connection_pool()
                .connect_options()
                .get_database()
                .map(str::to_owned),
            _ => None,
        };
        made.iter()
            .rev()
            .find(|t| url.as_deref().is_none_or(|name| t.url.contains(name)))
            .cloned()
            .unwrap()
    }
}

async fn write_rows<Db: ConnectionTrait>(db: &Db, rows: &[NewRow]) -> Vec<i64> {
    let mut ids = Vec::with_capacity(rows.len());
    for row in rows {
        let mut message = OutboxMessage::new(
            row.category,
            ShardId(row.shard.identifier()),
            ObjectId(row.object),
        );
        message.payload = row.payload.clone();
        // As a typed writer of that version stores it (`OutboxMessage::typed`).
        message.payload_version = row.payload_version;
        let written = match (row.shard.kind(), row.shard.region_name()) {
            (OutboxKind::Control, Some(region)) => write_control(db, [region], message)
                .await
                .unwrap()
                .remove(0),
            _ => write_region(db, message).await.unwrap(),
        };
        assert_eq!(written.shard, row.shard);
        ids.push(written.id);
    }
    ids
}

/// A request's transaction (`begin_write`), left open: it claims before its
/// commit as the write API's callers do, with `ClaimOn(&txn)`.
struct Writer(DatabaseTransaction);

#[async_trait]
impl ClaimBeforeCommit for Writer {
    async fn claim_before_commit(
        &self,
        request: &ClaimRequest,
        shards: &[(ShardKey, i64)],
    ) -> Result<Vec<ShardClaim>, StoreError> {
        ClaimOn(&self.0).claim_before_commit(request, shards).await
    }
}

#[async_trait]
impl WriterTransaction for Writer {
    async fn write(&mut self, rows: &[NewRow]) -> Vec<i64> {
        write_rows(&self.0, rows).await
    }

    async fn commit(self: Box<Self>) {
        self.0.commit().await.unwrap();
    }

    async fn rollback(self: Box<Self>) {
        self.0.rollback().await.unwrap();
    }
}

#[async_trait]
impl Backend for Databases {
    type Store = SeaOrmStore;

    async fn fresh(&self, label: &str) -> SeaOrmStore {
        let database = TestDatabase::of(self.backend, label).await.unwrap();
        if self.ring {
            OutboxRingMigrator::up(&database.db, None).await.unwrap();
            // Every test's rows cross the wrap from `_p2` back to `_p0`.
            let next = outbox_seaorm::ring::PARTITIONS * outbox_seaorm::ring::SPAN - 3;
            for table in ["region_outbox", "control_outbox"] {
                database
                    .db
                    .execute_unprepared(&format!("SELECT setval('{table}_ids', {next}, false)"))
                    .await
                    .unwrap();
            }
        }
        let store = database.store();
        self.made.lock().unwrap().push(database);
        store
    }

    async fn write(&self, store: &SeaOrmStore, rows: &[NewRow]) -> Vec<i64> {
        let txn = outbox_seaorm::begin_write(store.connection())
            .await
            .unwrap();
        let ids = write_rows(&txn, rows).await;
        txn.commit().await.unwrap();
        ids
    }

    async fn write_rolled_back(&self, store: &SeaOrmStore, rows: &[NewRow]) {
        let txn = outbox_seaorm::begin_write(store.connection())
            .await
            .unwrap();
        write_rows(&txn, rows).await;
        txn.rollback().await.unwrap();
    }

    async fn begin(&self, store: &SeaOrmStore) -> Box<dyn WriterTransaction> {
        let txn = outbox_seaorm::begin_write(store.connection())
            .await
            .unwrap();
        Box::new(Writer(txn))
    }

    async fn reconnect(&self, store: &SeaOrmStore) -> SeaOrmStore {
        let database = self.made(store);
        SeaOrmStore::new(database.connect_again(4).await.unwrap()).unwrap()
    }

    /// SQLite has one writer at a time: a transaction begun with
    /// `begin_write` holds its lock until it ends.
    fn concurrent_writers(&self) -> bool {
        self.backend != DbBackend::Sqlite
    }
}

mod postgres {
    use super::*;
    outbox_testing::conformance_tests!(Databases::new(DbBackend::Postgres));
}

/// The same rules on the partition ring (`OutboxRingMigrator`), every
/// test's rows written across a partition boundary.
mod postgres_ring {
    use super::*;
    outbox_testing::conformance_tests!(Databases::ring());
}

mod sqlite {
    use super::*;
    outbox_testing::conformance_tests!(Databases::new(DbBackend::Sqlite));
}
