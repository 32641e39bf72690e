//! `outbox_seaorm::connect`: PostgreSQL or SQLite from one URL.

#![allow(clippy::unwrap_used, missing_docs)]

use outbox_testing::database::{DbBackend, TestDatabase};
use sea_orm::ConnectionTrait;

outbox_testing::on_both_backends!(connect_opens_either_backend_from_its_url);

/// `outbox_seaorm::connect` opens a migrated database from its URL alone,
/// PostgreSQL or SQLite, ready for the outbox (its schema checks out); SQLite
/// with the outbox's pragmas.
async fn connect_opens_either_backend_from_its_url(backend: DbBackend) {
    let t = TestDatabase::of(backend, "connect_url").await.unwrap();
    let db = outbox_seaorm::connect(t.url.clone()).await.unwrap();
    assert_eq!(db.get_database_backend(), backend);
    outbox_seaorm::check_schema(&db).await.unwrap();
    if backend == DbBackend::Sqlite {
        let row = db
            .query_one_raw(sea_orm::Statement::from_string(
                DbBackend::Sqlite,
                "PRAGMA journal_mode",
            ))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.try_get_by_index::<String>(0).unwrap(), "wal");
    }
    db.close().await.unwrap();
    let error = outbox_seaorm::connect("mysql://u:secret@localhost/app")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("`mysql:`") && !error.contains("secret"),
        "{error}"
    );
}
