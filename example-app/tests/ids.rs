//! The region id allocator (`example_app::ids`): on PostgreSQL a database
//! sequence, so that a request frozen half-way holds nothing that other
//! requests of its region need.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use example_app::ids::{next_id, region_of, REGION_STRIDE, SEQUENCE_HEADROOM};
use example_app::migrations::RegionMigrator;
use outbox_testing::database::TestDatabase;
use sea_orm::{ConnectionTrait, TransactionTrait};
use sea_orm_migration::MigratorTrait;

/// A transaction that allocated an id and stays open (a frozen request)
/// does not hold up another allocation of the same table; ids keep
/// growing, and the one it drew is not handed out again after its
/// rollback.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_open_transaction_that_drew_an_id_blocks_no_other_allocation() {
    let t = TestDatabase::options()
        .migrator::<RegionMigrator>()
        .postgres("ids_sequence")
        .await
        .unwrap();
    let frozen = t.db.begin().await.unwrap();
    let first = next_id(&frozen, "organization", 1).await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(10), next_id(&t.db, "organization", 1))
        .await
        .expect("an allocation waited for an open transaction")
        .unwrap();
    assert!(second > first);
    assert_eq!(region_of(second), 1);
    frozen.rollback().await.unwrap();
    let third = next_id(&t.db, "organization", 1).await.unwrap();
    assert!(third > second);
}

/// The sequences start above the counter rows by a headroom, so that a
/// previous version's processes, which bump the rows during a rolling
/// deploy, cannot allocate the same ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sequences_start_above_the_counter_rows() {
    let t = TestDatabase::options()
        .no_migrations()
        .postgres("ids_headroom")
        .await
        .unwrap();
    // Up to the counter rows, then a counter in use, then the sequences.
    let before = RegionMigrator::get_pending_migrations(&t.db)
        .await
        .unwrap()
        .len() as u32;
    RegionMigrator::up(&t.db, Some(before - 1)).await.unwrap();
    t.db.execute_unprepared("UPDATE id_sequence SET last = 41 WHERE name = 'organization'")
        .await
        .unwrap();
    RegionMigrator::up(&t.db, None).await.unwrap();
    let id = next_id(&t.db, "organization", 2).await.unwrap();
    assert_eq!(id, (41 + SEQUENCE_HEADROOM) * REGION_STRIDE + 2);
}

/// Ids are unique and carry their region on SQLite too, and a table
/// without a sequence is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_allocates_from_its_counter_rows() {
    let t = TestDatabase::options()
        .migrator::<RegionMigrator>()
        .sqlite("ids_sqlite")
        .await
        .unwrap();
    let a = next_id(&t.db, "organization_member", 2).await.unwrap();
    let b = next_id(&t.db, "organization_member", 2).await.unwrap();
    assert_eq!((region_of(a), b - a), (2, REGION_STRIDE));
    assert!(next_id(&t.db, "widgets", 2).await.is_err());
}
