//! Real databases for tests (feature `seaorm`): PostgreSQL and SQLite
//! test databases for code built on `outbox-seaorm`, the throwaway
//! PostgreSQL clusters they live on, PgBouncer, and a wire-protocol
//! statement counter ([`wire`]).
//!
//! # `#[outbox_testing::test]`
//!
//! The way to test code that writes outbox rows, in the style of
//! `#[sqlx::test]`: an `async fn` that takes a [`TestDatabase`] becomes one
//! test per backend, `name::postgres` and `name::sqlite`, each on a fresh
//! database, migrated with your application's migrator:
//!
//! ```
//! # outbox_core::registry! { OrderScope = 0 { OrderUpdate = 1 } }
//! # mod migration {
//! #     use sea_orm_migration::prelude::*;
//! #     pub struct Migrator;
//! #     #[async_trait::async_trait]
//! #     impl MigratorTrait for Migrator {
//! #         fn migrations() -> Vec<Box<dyn MigrationTrait>> { outbox_migrations::migrations() }
//! #     }
//! # }
//! use outbox_testing::database::TestDatabase;
//! use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId};
//!
//! #[outbox_testing::test(migrator = migration::Migrator)]
//! async fn an_order_writes_its_outbox_row(db: TestDatabase) -> Result<(), Box<dyn std::error::Error>> {
//!     let txn = outbox_seaorm::begin_write(&db.db).await?;
//!     let message = OutboxMessage::new(OutboxCategory::OrderUpdate, ShardId(1), ObjectId(2));
//!     write_region(&txn, message).await?;
//!     txn.commit().await?;
//!     Ok(())
//! }
//! # fn main() {}
//! ```
//!
//! Options, between the parentheses:
//!
//! - `migrator = path::to::Migrator`: apply this `MigratorTrait`'s migrations
//!   (your own, with `outbox_migrations::migrations()` embedded among them)
//!   instead of the library's `outbox_migrations::OutboxMigrator`, which
//!   would create the outbox tables a second time;
//! - `no_migrations`: an empty database;
//! - `sqlite` or `postgres`: that backend only.
//!
//! Each test runs in a multi-thread Tokio runtime of its own and returns `()`
//! or `Result<(), E>` with `E: Debug`; `#[ignore]` and `#[should_panic]`
//! below the attribute apply to each generated test. Your test crate needs
//! only this crate with the feature:
//!
//! ```toml
//! [dev-dependencies]
//! outbox-testing = { version = "0.1", features = ["seaorm"] }
//! ```
//!
//! The same, by hand: [`TestDatabase::options`], then the backend
//! (`TestDatabase::options().migrator::<Migrator>().sqlite("label").await?`);
//! [`TestDatabase::sqlite`], [`TestDatabase::postgres`] and
//! [`TestDatabase::of`] apply the library's migrations.
//! [`on_both_backends!`](crate::on_both_backends) is the older form the
//! library's own tests use.
//!
//! # Backends
//!
//! A PostgreSQL test database lives on the server at `DATABASE_URL` when set;
//! otherwise on a throwaway cluster under the system temp directory, shared
//! by every test process of the machine, running `initdb` as the `postgres`
//! system user when the tests run as root. It never skips: without a server
//! and without the PostgreSQL binaries it fails with a message that says what
//! to install. The throwaway clusters (this shared one and the private ones
//! of [`start_cluster_at`]) preload `pg_stat_statements` with `track = all`
//! when the server has it, for tests that measure what the server did
//! (`CREATE EXTENSION pg_stat_statements` in a database to read it).
//!
//! A SQLite test database is a fresh file, opened as
//! [`outbox_seaorm::sqlite::connect`] opens one (WAL, busy timeout, foreign keys).
//!
//! [`PgBouncer`] starts Debian's `pgbouncer` in front of a test server, in
//! session or transaction pooling mode, and stops it when dropped.
//! [`wire::StatementCounter`] is a loopback proxy that counts the statements
//! and round trips a pool sends through it.
//!
//! # Nothing left behind
//!
//! As in `sqlx`'s test support, a test's database is dropped (the SQLite file
//! removed) when the last clone of its [`TestDatabase`] drops, and kept when
//! that happens during a panic: the failing test's output ends with its URL.
//! (So the last clone should be the test's own: one held by a spawned task
//! drops outside the panic.) `#[outbox_testing::test]` holds a clone until
//! the test has passed: a test that panics or returns `Err` keeps its
//! database.
//!
//! The throwaway cluster runs while test processes use it. The first one
//! starts it (`initdb` only once: the data folder stays for the next run);
//! when the last one exits, whether `cargo test` runs the test binaries one
//! after another or `cargo nextest` runs tests in parallel processes, it drops
//! the databases left behind and stops the server. Processes that were killed
//! are recognised and do not count. A private cluster
//! ([`start_cluster_at`]) that its test did not stop is stopped and removed
//! when its process exits. Environment variables:
//!
//! - `DATABASE_URL`: use this server; nothing is started or stopped, test
//!   databases of passing tests are still dropped.
//! - `OUTBOX_TEST_KEEP_CLUSTER=1`: leave the cluster running after the tests,
//!   with the databases of failing tests in it (`pg_ctl stop -D <dir>/data`,
//!   as `postgres` when the tests ran as root, or [`stop_test_cluster`] to
//!   stop it).
//! - `OUTBOX_TEST_PG_DIR`: where the cluster lives (default: `outbox-test-pg`
//!   in the system temp directory).

#[doc(hidden)]
pub mod __private;
mod cleanup;
mod cluster_users;
mod options;
mod owned_database;
mod pgbouncer;
mod postgres;
pub mod wire;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection};

pub use options::TestDatabaseOptions;
use owned_database::OwnedDatabase;
pub use pgbouncer::{PgBouncer, PoolMode};
pub use postgres::{
    admin_url, cluster_dir, crash_restart_cluster_at, restart_cluster_at, start_cluster_at,
    stop_cluster_at, stop_test_cluster,
};

/// A test database could not be prepared.
#[derive(Debug, thiserror::Error)]
#[error("test database setup failed: {0}")]
pub struct TestDbError(pub String);

impl From<sea_orm::DbErr> for TestDbError {
    fn from(error: sea_orm::DbErr) -> Self {
        TestDbError(error.to_string())
    }
}

/// Whether `OUTBOX_TEST_KEEP_CLUSTER` asks to keep the test cluster running.
fn keep_cluster() -> bool {
    std::env::var("OUTBOX_TEST_KEEP_CLUSTER").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A fresh, migrated database for one test, dropped when the last clone
/// drops, unless the test is panicking (see the [module docs](self)).
///
/// Keep it (or a clone) for as long as the test uses the database: clones of
/// [`db`](Self::db), [`store`](Self::store) and [`connect_again`](Self::connect_again)
/// pools do not keep it alive, so
/// `TestDatabase::sqlite("x").await?.store()` hands out a store whose
/// database is already gone.
#[derive(Debug, Clone)]
pub struct TestDatabase {
    /// A pooled connection to it.
    pub db: DatabaseConnection,
    /// Its URL, to open more connections (another "process").
    pub url: String,
    #[allow(
        dead_code,
        reason = "held for its Drop: the database goes with the last clone"
    )]
    owned: Arc<OwnedDatabase>,
}

impl TestDatabase {
    /// Options to create a database with your own migrator, or none:
    /// `TestDatabase::options().migrator::<Migrator>().sqlite("label")`.
    /// Without any, the same as the constructors below.
    pub fn options() -> TestDatabaseOptions {
        TestDatabaseOptions::new()
    }

    /// A fresh PostgreSQL database named after `label`, with the outbox
    /// migrations (`outbox_migrations::OutboxMigrator`) applied.
    ///
    /// # Errors
    ///
    /// [`TestDbError`] when no server can be reached or started.
    pub async fn postgres(label: &str) -> Result<Self, TestDbError> {
        Self::options().postgres(label).await
    }

    /// A fresh PostgreSQL database named after `label` on the server at
    /// `admin`, with the outbox migrations applied.
    ///
    /// # Errors
    ///
    /// [`TestDbError`] when the server cannot be reached.
    pub async fn postgres_on(admin: &str, label: &str) -> Result<Self, TestDbError> {
        Self::options().postgres_on(admin, label).await
    }

    /// A fresh SQLite database file named after `label`, with the outbox
    /// migrations applied.
    ///
    /// # Errors
    ///
    /// [`TestDbError`] when the file cannot be created.
    pub async fn sqlite(label: &str) -> Result<Self, TestDbError> {
        Self::options().sqlite(label).await
    }

    /// A fresh database of `backend`, with the outbox migrations applied.
    ///
    /// # Errors
    ///
    /// See [`postgres`](Self::postgres) and [`sqlite`](Self::sqlite).
    pub async fn of(backend: DbBackend, label: &str) -> Result<Self, TestDbError> {
        Self::options().of(backend, label).await
    }

    async fn create_postgres(
        options: TestDatabaseOptions,
        admin: &str,
        label: &str,
    ) -> Result<Self, TestDbError> {
        let admin = admin.to_owned();
        let name = database_name(label);
        let admin_db = connect(&admin, 1).await?;
        admin_db
            .execute_unprepared(&format!("CREATE DATABASE \"{name}\""))
            .await?;
        admin_db.close().await?;
        let url = replace_database(&admin, &name);
        // Owned from here: a failed migration drops it again.
        let owned = OwnedDatabase::Postgres {
            admin,
            name,
            url: url.clone(),
        };
        Self::migrated(options, url, owned).await
    }

    async fn create_sqlite(options: TestDatabaseOptions, label: &str) -> Result<Self, TestDbError> {
        let dir = sqlite_dir();
        std::fs::create_dir_all(&dir)
            .map_err(|e| TestDbError(format!("{}: {e}", dir.display())))?;
        let path: PathBuf = dir.join(format!("{}.sqlite", database_name(label)));
        let url = format!("sqlite://{}?mode=rwc", path.display());
        // The first connection creates the file, in WAL mode (see `connect`).
        Self::migrated(options, url, OwnedDatabase::Sqlite { path }).await
    }

    async fn migrated(
        options: TestDatabaseOptions,
        url: String,
        owned: OwnedDatabase,
    ) -> Result<Self, TestDbError> {
        // Dropped on every error return below: the database goes with it.
        let owned = Arc::new(owned);
        let db = connect(&url, 10).await?;
        if let Err(error) = options.migrate(&db).await {
            // Closed first, so that the file or database goes at once.
            let _ = db.close().await;
            return Err(error);
        }
        Ok(Self { db, url, owned })
    }

    /// Another, independent connection pool to the same database.
    ///
    /// # Errors
    ///
    /// [`TestDbError`] when it cannot connect.
    pub async fn connect_again(
        &self,
        max_connections: u32,
    ) -> Result<DatabaseConnection, TestDbError> {
        connect(&self.url, max_connections).await
    }

    /// A [`SeaOrmStore`](outbox_seaorm::SeaOrmStore) over this database.
    pub fn store(&self) -> outbox_seaorm::SeaOrmStore {
        // PostgreSQL or SQLite, by construction.
        outbox_seaorm::SeaOrmStore::new(self.db.clone()).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// Connects with a bounded pool and quiet statement logging; SQLite with
/// [`outbox_seaorm::sqlite::configure`] on every connection (WAL, busy timeout,
/// foreign keys).
///
/// The pool reaps no idle or old connections: that leaves sqlx without its
/// maintenance task, which can spin forever when its idle count races below
/// zero, and with it hang the test runtime's shutdown
/// (launchbadge/sqlx#3645; seen here with sqlx 0.9.0).
///
/// # Errors
///
/// [`TestDbError`] when it cannot connect.
pub async fn connect(url: &str, max_connections: u32) -> Result<DatabaseConnection, TestDbError> {
    let mut options = if url.starts_with("sqlite:") {
        outbox_seaorm::sqlite::options(url)
    } else {
        ConnectOptions::new(url)
    };
    options
        .max_connections(max_connections)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(30))
        .idle_timeout(None::<Duration>)
        .max_lifetime(None::<Duration>)
        .sqlx_logging(false);
    Database::connect(options)
        .await
        .map_err(|e| TestDbError(format!("cannot connect to {url}: {e}")))
}

/// Where [`TestDatabase::sqlite`] puts its files.
fn sqlite_dir() -> PathBuf {
    std::env::temp_dir().join("outbox-tests-sqlite")
}

fn database_name(label: &str) -> String {
    let mut name: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    name.truncate(40);
    format!("t_{name}_{:08x}", rand::random::<u32>())
}

fn replace_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_end = base
        .find("://")
        .map(|i| i + 3)
        .and_then(|start| base[start..].find('/').map(|i| start + i))
        .unwrap_or(base.len());
    let mut out = format!("{}/{}", &base[..authority_end], name);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// The backend enum the generated tests pass (re-exported for
/// [`on_both_backends!`](crate::on_both_backends)).
pub use sea_orm::DbBackend;

/// Generates, from `async fn name(backend: DbBackend)` test bodies, one
/// PostgreSQL and one SQLite `#[tokio::test]` each, in modules `postgres` and
/// `sqlite`. The calling crate needs `tokio` (with `macros` and
/// `rt-multi-thread`).
///
/// ```
/// async fn commits(backend: outbox_testing::database::DbBackend) { /* ... */ }
/// outbox_testing::on_both_backends!(commits);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::database::DbBackend::Postgres).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::database::DbBackend::Sqlite).await;
                }
            )*
        }
    };
}

#[cfg(test)]
mod harness_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_url_is_rewritten() {
        assert_eq!(
            replace_database("postgres://u@127.0.0.1:5/postgres", "t_x"),
            "postgres://u@127.0.0.1:5/t_x"
        );
        assert_eq!(
            replace_database("postgres://u@h:5/db?sslmode=disable", "t"),
            "postgres://u@h:5/t?sslmode=disable"
        );
        assert_eq!(
            replace_database("postgres://u@h:5", "t"),
            "postgres://u@h:5/t"
        );
    }
}
