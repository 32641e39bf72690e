//! The database a [`TestDatabase`](super::TestDatabase) created, removed when
//! the last clone of it drops, unless the test is failing: then it stays, and
//! its name goes to stderr (the test's captured output).

use std::path::PathBuf;

use super::cleanup::drop_postgres_database;
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
