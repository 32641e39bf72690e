//! The harness's own promises: a passing test's database is gone, a failing
//! test's stays, and the last user of a cluster stops it without losing its
//! data folder.

#![allow(clippy::unwrap_used)]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use sea_orm::{ConnectionTrait, DbBackend, Statement};

use super::cleanup::drop_postgres_database;
use super::owned_database::OwnedDatabase;
use super::postgres::{is_running, join_cluster_at, leave_cluster_at, Left};
use super::{admin_url, connect, stop_cluster_at, TestDatabase};

fn postgres_name(database: &TestDatabase) -> String {
    match &*database.owned {
        OwnedDatabase::Postgres { name, .. } => name.clone(),
        OwnedDatabase::Sqlite { .. } => panic!("not a PostgreSQL database"),
    }
}

fn sqlite_path(database: &TestDatabase) -> PathBuf {
    match &*database.owned {
        OwnedDatabase::Sqlite { path } => path.clone(),
        OwnedDatabase::Postgres { .. } => panic!("not a SQLite database"),
    }
}

async fn database_exists(admin: &str, name: &str) -> bool {
    let db = connect(admin, 1).await.unwrap();
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT count(*) AS n FROM pg_database WHERE datname = $1",
            [name.into()],
        ))
        .await
        .unwrap()
        .unwrap();
    db.close().await.unwrap();
    row.try_get::<i64>("", "n").unwrap() == 1
}

/// Drops `value` the way a failing test does: while a panic unwinds.
fn drop_while_panicking<T>(value: T) {
    let unwound = catch_unwind(AssertUnwindSafe(move || {
        let _dropped_by_the_panic = value;
        panic!("a failing test (expected by the harness tests)");
    }));
    assert!(unwound.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passing_tests_postgres_database_is_dropped_with_its_last_clone() {
    let admin = admin_url().unwrap();
    let database = TestDatabase::postgres("harness_dropped").await.unwrap();
    let name = postgres_name(&database);
    let clone = database.clone();
    drop(database);
    assert!(
        database_exists(&admin, &name).await,
        "a clone still uses it"
    );
    // Connections still open are cut (`WITH (FORCE)`).
    let _still_open = clone.connect_again(1).await.unwrap();
    drop(clone);
    assert!(!database_exists(&admin, &name).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_tests_postgres_database_is_kept() {
    let admin = admin_url().unwrap();
    let database = TestDatabase::postgres("harness_kept").await.unwrap();
    let name = postgres_name(&database);
    drop_while_panicking(database);
    assert!(database_exists(&admin, &name).await);
    let dropper = admin.clone();
    let dropped = name.clone();
    tokio::task::spawn_blocking(move || drop_postgres_database(&dropper, &dropped))
        .await
        .unwrap()
        .unwrap();
    assert!(!database_exists(&admin, &name).await);
}

#[tokio::test]
async fn a_passing_tests_sqlite_files_are_removed_and_a_failing_tests_kept() {
    let passing = TestDatabase::sqlite("harness_sqlite_passing")
        .await
        .unwrap();
    let path = sqlite_path(&passing);
    assert!(path.exists());
    drop(passing);
    assert!(!path.exists());
    let mut wal = path.clone().into_os_string();
    wal.push("-wal");
    assert!(!Path::new(&wal).exists());

    let failing = TestDatabase::sqlite("harness_sqlite_failing")
        .await
        .unwrap();
    let path = sqlite_path(&failing);
    drop_while_panicking(failing);
    assert!(path.exists());
    super::owned_database::remove_sqlite_files(&path).unwrap();
}

/// Stops and removes a private cluster even when the test fails half-way.
struct ClusterFolder(PathBuf);

impl Drop for ClusterFolder {
    fn drop(&mut self) {
        let _ = stop_cluster_at(&self.0);
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn the_last_user_stops_the_cluster_and_the_next_reuses_its_data() {
    let dir = ClusterFolder(std::env::temp_dir().join(format!(
        "outbox-harness-cluster-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )));
    let data = dir.0.join("data");
    let (first, admin) = join_cluster_at(&dir.0).unwrap();
    let (second, admin_again) = join_cluster_at(&dir.0).unwrap();
    assert_eq!(admin, admin_again, "one server for both users");
    block_on(async {
        let db = connect(&admin, 1).await.unwrap();
        db.execute_unprepared("CREATE DATABASE t_left_behind")
            .await
            .unwrap();
        db.close().await.unwrap();
    });
    // Data that only survives if no second initdb runs.
    let marker = data.join("outbox-harness-marker");
    std::fs::write(&marker, "initdb ran once").unwrap();

    assert_eq!(leave_cluster_at(&dir.0, first, false).unwrap(), Left::InUse);
    assert!(block_on(database_exists(&admin, "t_left_behind")));
    assert_eq!(
        leave_cluster_at(&dir.0, second, false).unwrap(),
        Left::Stopped
    );
    assert!(!is_running(&data).unwrap(), "the server is stopped");

    let (third, admin) = join_cluster_at(&dir.0).unwrap();
    assert!(marker.exists(), "the data folder was reused");
    assert!(
        !block_on(database_exists(&admin, "t_left_behind")),
        "the last user dropped what tests left behind"
    );
    assert_eq!(leave_cluster_at(&dir.0, third, true).unwrap(), Left::Kept);
    assert!(is_running(&data).unwrap(), "kept running");
}
