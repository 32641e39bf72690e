//! The database a [`TestDatabase`](super::TestDatabase) created, removed when
//! the last clone of it drops, unless the test is failing: then it stays, and
//! its name goes to stderr (the test's captured output).

use std::path::PathBuf;
use std::time::Duration;

use sea_orm::sqlx::{self, Connection};

use super::TestDbError;

/// What a test database owns on its server or disk.
#[derive(Debug)]
pub(crate) enum OwnedDatabase {
    /// Database `name` on the server at `admin`.
    Postgres {
        /// The server's admin URL.
        admin: String,
        /// The database's name.
        name: String,
        /// Its own URL, for the message that keeps it.
        url: String,
    },
    /// A SQLite file (and its `-wal` and `-shm` companions).
    Sqlite {
        /// The main file.
        path: PathBuf,
    },
}

impl Drop for OwnedDatabase {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.kept_message());
            return;
        }
        let result = match self {
            OwnedDatabase::Postgres { admin, name, .. } => drop_postgres_database(admin, name),
            OwnedDatabase::Sqlite { path } => remove_sqlite_files(path),
        };
        if let Err(error) = result {
            eprintln!("outbox test harness: {}", error.0);
        }
    }
}

impl OwnedDatabase {
    fn kept_message(&self) -> String {
        match self {
            OwnedDatabase::Postgres { url, .. } => {
                let until = if super::postgres::on_shared_cluster(url) && !super::keep_cluster() {
                    "until the test cluster stops after the last test process (set \
                     OUTBOX_TEST_KEEP_CLUSTER=1 to keep both)"
                } else {
                    "until you drop it"
                };
                format!("outbox test harness: the failing test's database stays {until}: {url}")
            }
            OwnedDatabase::Sqlite { path } => format!(
                "outbox test harness: the failing test's database stays until you remove it: {}",
                path.display()
            ),
        }
    }
}

/// Drops database `name` on the server at `admin`, cutting its connections
/// (`WITH (FORCE)`, PostgreSQL 13 or later). Blocks: it runs on a thread of
/// its own with its own runtime, so that it works from `Drop` inside or
/// outside a Tokio runtime.
///
/// A server that refuses connections has gone away (a test stopped its
/// private cluster), and its databases with it: that is success.
///
/// # Errors
///
/// [`TestDbError`] when the server answers but the database cannot be dropped.
pub(crate) fn drop_postgres_database(admin: &str, name: &str) -> Result<(), TestDbError> {
    let statement = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
    run_on_admin_connection(admin, move |mut connection| async move {
        let result = sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
            .execute(&mut connection)
            .await;
        let _ = connection.close().await;
        result.map(|_| ())
    })
    .map_err(|e| TestDbError(format!("cannot drop test database `{name}`: {e}")))
}

/// Drops every database of the test cluster at `admin` but the built-in ones.
///
/// # Errors
///
/// [`TestDbError`] when the server answers but a database cannot be dropped.
pub(crate) fn drop_all_databases(admin: &str) -> Result<(), TestDbError> {
    run_on_admin_connection(admin, |mut connection| async move {
        let names: Vec<(String,)> = sqlx::query_as(
            "SELECT datname FROM pg_database \
             WHERE datname NOT IN ('postgres', 'template0', 'template1')",
        )
        .fetch_all(&mut connection)
        .await?;
        for (name,) in names {
            let statement = format!(
                "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                name.replace('"', "\"\"")
            );
            sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
                .execute(&mut connection)
                .await?;
        }
        connection.close().await
    })
    .map_err(|e| TestDbError(format!("cannot drop the test cluster's databases: {e}")))
}

/// Runs `work` on one connection (no pool: a refused connection fails at
/// once, where a pool would retry until its timeout) to the server at
/// `admin`, on a new thread with a current-thread runtime.
fn run_on_admin_connection<F, Fut>(admin: &str, work: F) -> Result<(), sqlx::Error>
where
    F: FnOnce(sqlx::PgConnection) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), sqlx::Error>>,
{
    let admin = admin.to_owned();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(sqlx::Error::Io)?;
        runtime.block_on(async move {
            let connecting = sqlx::PgConnection::connect(&admin);
            let connection = match tokio::time::timeout(Duration::from_secs(30), connecting).await {
                Ok(Ok(connection)) => connection,
                Ok(Err(sqlx::Error::Io(e)))
                    if e.kind() == std::io::ErrorKind::ConnectionRefused =>
                {
                    return Ok(());
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(sqlx::Error::PoolTimedOut),
            };
            work(connection).await
        })
    });
    thread
        .join()
        .unwrap_or_else(|_| Err(sqlx::Error::Protocol("the cleanup thread panicked".into())))
}

/// Removes a SQLite database file and its WAL companions.
///
/// # Errors
///
/// [`TestDbError`] when a file exists but cannot be removed.
pub(crate) fn remove_sqlite_files(path: &std::path::Path) -> Result<(), TestDbError> {
    let mut companions = vec![path.to_path_buf()];
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        companions.push(PathBuf::from(name));
    }
    for file in companions {
        match std::fs::remove_file(&file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(TestDbError(format!(
                    "cannot remove test database file {}: {e}",
                    file.display()
                )))
            }
        }
    }
    Ok(())
}
