//! Opening a SQLite database the way the outbox needs it.
//!
//! [`connect`] opens a pool whose every connection runs with:
//!
//! - **`journal_mode = WAL`**. In SQLite's default rollback-journal mode a
//!   commit waits until no connection is reading, and a waiting writer stops
//!   new readers: a request reading its models and the background drain
//!   committing its deletes hold each other up. In WAL mode readers never
//!   block the writer and the writer never blocks readers; only writers wait
//!   for each other. WAL is a property of the file: the first connection
//!   switches a new file to it, later ones find it set.
//! - **`synchronous = NORMAL`**, the usual pairing with WAL. A commit appends
//!   to the WAL without waiting for the disk; the WAL is synced when it is
//!   checkpointed into the database. The file stays consistent whatever
//!   happens, and a crash of the application loses nothing; a power loss or
//!   an operating system crash may roll back the last commits, each one whole
//!   (your model change and its outbox row together, never one without the
//!   other), and a delete of delivered rows rolled back means those messages
//!   are delivered again, which receivers accept: the same trade the
//!   PostgreSQL store makes when its flush commits without waiting for the
//!   WAL. sqlx's default, `FULL`, syncs the WAL at every commit, which costs a
//!   disk flush per request and per drained batch; set it back with
//!   [`configure`] (see [`options`]) if your own data needs it.
//! - **`busy_timeout`** of [`BUSY_TIMEOUT`]. SQLite has one writer at a time;
//!   a connection that wants to write while another does (a request
//!   committing while the drain deletes delivered rows) waits up to this long
//!   for the lock, then fails with `SQLITE_BUSY` ("database is locked").
//!   Without a timeout it would fail at once. It cannot rescue a deferred
//!   transaction that read, then tries to write after another connection
//!   committed: begin those with [`begin_write`](crate::begin_write).
//! - **`foreign_keys = ON`**. SQLite enforces foreign keys only on
//!   connections that ask; with it, your tables' constraints hold as they do
//!   on PostgreSQL.
//!
//! All four are set when sqlx opens each connection of the pool. A `PRAGMA`
//! run once through the pool (`db.execute_unprepared("PRAGMA ...")`) reaches
//! only the one connection that ran it; only `journal_mode = WAL` outlives
//! that connection.
//!
//! sqlx already defaults to a 5 s busy timeout and foreign keys on; they are
//! set here anyway, so that what the outbox relies on does not depend on a
//! driver's defaults.
//!
//! ```
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use sea_orm::{ConnectionTrait, Statement};
//!
//! let path = std::env::temp_dir().join(format!("outbox-sqlite-doc-{}.sqlite", std::process::id()));
//! // `mode=rwc`: create the file when it does not exist.
//! let db = outbox_seaorm::sqlite::connect(format!("sqlite://{}?mode=rwc", path.display())).await?;
//!
//! let backend = db.get_database_backend();
//! let row = db.query_one_raw(Statement::from_string(backend, "PRAGMA journal_mode")).await?;
//! let mode: String = row.expect("PRAGMA returns a row").try_get_by_index(0)?;
//! assert_eq!(mode, "wal");
//!
//! db.close().await?;
//! for suffix in ["", "-wal", "-shm"] {
//!     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use sea_orm::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sea_orm::{ConnectOptions, Database, DatabaseConnection, DbErr};

/// How long a connection waits for another one's write lock before failing
/// with `SQLITE_BUSY`: 5 s, the same as sqlx's default.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The pool size [`options`] sets: 10, sqlx's default pool size. SeaORM
/// opens a single connection for SQLite when told nothing, with which the
/// drain and every request queue behind each other and WAL's concurrent
/// readers are no use.
pub const MAX_CONNECTIONS: u32 = 10;

/// Sets the outbox's pragmas on sqlx's options of one SQLite connection:
/// WAL, `synchronous = NORMAL`, [`BUSY_TIMEOUT`], foreign keys (see the
/// [module docs](self) for why).
///
/// For [`ConnectOptions::map_sqlx_sqlite_opts`], which keeps one function
/// only: to change more of sqlx's options, call this inside your own.
pub fn configure(options: SqliteConnectOptions) -> SqliteConnectOptions {
    options
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(BUSY_TIMEOUT)
        .foreign_keys(true)
}

/// SeaORM connection options for the SQLite database at `url`, with
/// [`configure`] applied to every connection and a pool of
/// [`MAX_CONNECTIONS`].
///
/// Change what you need before connecting. `map_sqlx_sqlite_opts` replaces
/// the function set here, so call [`configure`] inside yours:
///
/// ```
/// use sea_orm::sqlx::sqlite::SqliteSynchronous;
///
/// let mut options = outbox_seaorm::sqlite::options("sqlite://app.sqlite?mode=rwc");
/// options
///     .max_connections(20)
///     .sqlx_logging(false)
///     .map_sqlx_sqlite_opts(|o| {
///         outbox_seaorm::sqlite::configure(o).synchronous(SqliteSynchronous::Full)
///     });
/// // let db = sea_orm::Database::connect(options).await?;
/// ```
pub fn options(url: impl Into<String>) -> ConnectOptions {
    let mut options = ConnectOptions::new(url);
    options
        .max_connections(MAX_CONNECTIONS)
        .map_sqlx_sqlite_opts(configure);
    options
}

/// Opens a pool to the SQLite database at `url` with [`options`]. Add
/// `?mode=rwc` to the URL to create the file when it does not exist.
///
/// SQLite only: an app whose URL may name PostgreSQL too (`DATABASE_URL`)
/// calls [`crate::connect`], which chooses by the scheme and opens SQLite
/// with these same options.
///
/// # Errors
///
/// The database's, when the URL is not a SQLite one or the file cannot be
/// opened.
pub async fn connect(url: impl Into<String>) -> Result<DatabaseConnection, DbErr> {
    let url = url.into();
    if !url.starts_with("sqlite:") {
        // The scheme only: another database's URL may hold a password.
        let scheme = url.split(':').next().unwrap_or_default();
        return Err(DbErr::Conn(sea_orm::RuntimeErr::Internal(format!(
            "`outbox_seaorm::sqlite::connect` opens SQLite databases, not `{scheme}:` URLs; \
             use `outbox_seaorm::connect`, which opens PostgreSQL or SQLite by the URL's scheme"
        ))));
    }
    Database::connect(options(url)).await
}
