//! `outbox_seaorm::sqlite`: the pragmas the outbox needs hold on every
//! connection of the pool, not only on the first.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use outbox_testing::database::TestDatabase;
use sea_orm::sqlx::sqlite::SqliteSynchronous;
use sea_orm::{ConnectionTrait, Database, DbBackend, Statement, TransactionTrait};

/// `PRAGMA name`'s value, as text, on `db`'s connection.
async fn pragma(db: &impl ConnectionTrait, name: &str) -> String {
    let row = db
        .query_one_raw(Statement::from_string(
            DbBackend::Sqlite,
            format!("PRAGMA {name}"),
        ))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("PRAGMA {name} returned no row"));
    row.try_get_by_index::<String>(0)
        .or_else(|_| row.try_get_by_index::<i64>(0).map(|n| n.to_string()))
        .unwrap()
}

/// An empty SQLite file, removed when the test passes.
async fn empty_file(label: &str) -> TestDatabase {
    TestDatabase::options()
        .no_migrations()
        .sqlite(label)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pragmas_hold_on_every_pooled_connection() {
    let file = empty_file("sqlite_pragmas").await;
    let db = outbox_seaorm::sqlite::connect(file.url.clone())
        .await
        .unwrap();

    // Two open transactions hold two connections of the pool at once.
    let first = db.begin().await.unwrap();
    let second = db.begin().await.unwrap();
    // Distinct connections: a temporary table is private to its connection.
    first
        .execute_unprepared("CREATE TEMP TABLE only_here (x integer)")
        .await
        .unwrap();
    let temp_tables = second
        .query_one_raw(Statement::from_string(
            DbBackend::Sqlite,
            "SELECT count(*) FROM sqlite_temp_master",
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get_by_index::<i64>(0)
        .unwrap();
    assert_eq!(temp_tables, 0, "the two transactions share a connection");

    for txn in [&first, &second] {
        assert_eq!(pragma(txn, "journal_mode").await, "wal");
        assert_eq!(pragma(txn, "busy_timeout").await, "5000");
        assert_eq!(pragma(txn, "foreign_keys").await, "1");
        // NORMAL
        assert_eq!(pragma(txn, "synchronous").await, "1");
    }
    first.rollback().await.unwrap();
    second.rollback().await.unwrap();
    db.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_can_be_changed_on_top_of_the_pragmas() {
    let file = empty_file("sqlite_options").await;
    let mut options = outbox_seaorm::sqlite::options(file.url.clone());
    options.max_connections(2).map_sqlx_sqlite_opts(|o| {
        outbox_seaorm::sqlite::configure(o)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_millis(1500))
    });
    let db = Database::connect(options).await.unwrap();
    let first = db.begin().await.unwrap();
    let second = db.begin().await.unwrap();
    for txn in [&first, &second] {
        assert_eq!(pragma(txn, "journal_mode").await, "wal");
        assert_eq!(pragma(txn, "synchronous").await, "2"); // FULL
        assert_eq!(pragma(txn, "busy_timeout").await, "1500");
        assert_eq!(pragma(txn, "foreign_keys").await, "1");
    }
    first.rollback().await.unwrap();
    second.rollback().await.unwrap();
    db.close().await.unwrap();
}

#[tokio::test]
async fn connect_refuses_other_databases_without_echoing_their_url() {
    let error = outbox_seaorm::sqlite::connect("postgres://app:secret@db.invalid/app")
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("`postgres:`"), "{error}");
    assert!(!error.contains("secret"), "{error}");
}

#[test]
fn defaults() {
    assert_eq!(outbox_seaorm::sqlite::BUSY_TIMEOUT, Duration::from_secs(5));
    assert_eq!(outbox_seaorm::sqlite::MAX_CONNECTIONS, 10);
}
