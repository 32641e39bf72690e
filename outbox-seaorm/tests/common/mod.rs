//! Shared test fixtures: a registry, a recording receiver, both backends.

#![allow(dead_code, missing_docs, clippy::unwrap_used)]

use outbox_core::store::StoreAdmin;
use outbox_core::{Drainer, OutboxKind};
use outbox_testing::database::TestDatabase;
use sea_orm::{ConnectionTrait, DbBackend, Statement};

outbox_core::registry! {
    /// Organization-owned data.
    OrganizationScope = 0 (shard_field = "organization_id") {
        OrganizationUpdate = 1,
        OrganizationMemberUpdate = 2,
        LegacyPing = 3 (retired),
    }
    /// User-owned data.
    UserScope = 1 (shard_field = "user_id") {
        UserUpdate = 10,
    }
    /// One shard per event.
    AuditLogScope = 2 {
        AuditLogEvent = 20,
    }
}

/// The recording receiver of `outbox_testing`, for this registry.
pub type Recorder = outbox_testing::Recorder<OutboxCategory>;

pub async fn database(backend: DbBackend, label: &str) -> TestDatabase {
    TestDatabase::of(backend, label)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The `n` column of the one row a PostgreSQL statement returns (a count,
/// a statistic).
pub async fn number(db: &impl ConnectionTrait, sql: &str) -> i64 {
    db.query_one_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no row from {sql}"))
        .try_get::<i64>("", "n")
        .unwrap()
}

/// Background rounds of the region outbox until one finds nothing, then
/// the completer's batches; asserts that nothing is left pending.
pub async fn drain_everything(t: &TestDatabase, drainer: &Drainer<OutboxCategory>) {
    while !drainer
        .drain_due(OutboxKind::Region)
        .await
        .unwrap()
        .is_empty()
    {}
    drainer.settled().await;
    assert_eq!(
        t.store().pending_count(OutboxKind::Region).await.unwrap(),
        0
    );
}
