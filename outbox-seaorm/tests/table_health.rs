//! What the store tells operators of an outbox table's upkeep.

#![allow(missing_docs, clippy::unwrap_used)]

use outbox_core::{OutboxKind, StoreAdmin};
use outbox_seaorm::testing::TestDatabase;
use sea_orm::ConnectionTrait;

/// On PostgreSQL: the table's dead tuples, and the age of another session's
/// open transaction while it holds back vacuum, gone when it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_reports_dead_tuples_and_a_transaction_holding_back_vacuum() {
    let t = TestDatabase::postgres("table_health").await.unwrap();
    let store = t.store();
    let health = store.table_health(OutboxKind::Region).await.unwrap();
    assert!(health.dead_tuples.is_some(), "{health:?}");
    assert_eq!(
        health.oldest_transaction_age, None,
        "nobody else is in a transaction"
    );

    let other = t.connect_again(1).await.unwrap();
    other.execute_unprepared("BEGIN").await.unwrap();
    other
        .execute_unprepared("SELECT txid_current()")
        .await
        .unwrap();
    let health = store.table_health(OutboxKind::Control).await.unwrap();
    assert!(health.oldest_transaction_age.is_some(), "{health:?}");

    other.execute_unprepared("ROLLBACK").await.unwrap();
    let health = store.table_health(OutboxKind::Region).await.unwrap();
    assert_eq!(health.oldest_transaction_age, None);
    other.close().await.unwrap();
}

/// SQLite has neither to tell.
#[tokio::test]
async fn sqlite_reports_nothing_it_cannot_know() {
    let t = TestDatabase::sqlite("table_health").await.unwrap();
    let health = t.store().table_health(OutboxKind::Region).await.unwrap();
    assert_eq!(
        (health.dead_tuples, health.oldest_transaction_age),
        (None, None)
    );
}
