//! Opening PostgreSQL or SQLite from one URL, as an app that reads
//! `DATABASE_URL` needs.

use sea_orm::{ConnectOptions, Database, DatabaseConnection, DbErr};

/// Connect options for `url`, PostgreSQL (`postgres://`, `postgresql://`)
/// or SQLite (`sqlite:`, with [`sqlite::options`](crate::sqlite::options):
/// WAL, a busy timeout and foreign keys on every pooled connection), with
/// SQL statement logging off (the outbox's statements run all the time).
/// Tune the pool on what it returns, then `sea_orm::Database::connect` it.
///
/// # Errors
///
/// [`UnsupportedUrl`] for any other scheme (the message names the scheme
/// only: a URL may hold a password).
pub fn connect_options(url: impl Into<String>) -> Result<ConnectOptions, UnsupportedUrl> {
    let url = url.into();
    let scheme = url.split(':').next().unwrap_or_default().to_owned();
    let mut options = match scheme.as_str() {
        "postgres" | "postgresql" => ConnectOptions::new(url),
        "sqlite" => crate::sqlite::options(url),
        _ => return Err(UnsupportedUrl { scheme }),
    };
    options.sqlx_logging(false);
    Ok(options)
}

/// Opens a pool to the PostgreSQL or SQLite database at `url` with
/// [`connect_options`]: the branch every app that reads `DATABASE_URL`
/// would write otherwise. The backend comes from the URL's scheme, as with
/// `sea_orm::Database::connect`; [`sqlite::connect`](crate::sqlite::connect)
/// is the SQLite-only form (it refuses any other scheme), with the same
/// SQLite options.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sea_orm::DbErr> {
/// # let file = std::env::temp_dir().join(format!("connect-doc-{}.sqlite", std::process::id()));
/// # let url = format!("sqlite://{}?mode=rwc", file.display());
/// // let url = std::env::var("DATABASE_URL")?;
/// let db = outbox_seaorm::connect(&url).await?;
/// # db.close().await?;
/// # for suffix in ["", "-wal", "-shm"] { let _ = std::fs::remove_file(format!("{}{suffix}", file.display())); }
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`DbErr::Conn`] with [`UnsupportedUrl`]'s message for another scheme;
/// the database's error when it cannot be reached.
pub async fn connect(url: impl Into<String>) -> Result<DatabaseConnection, DbErr> {
    let options = connect_options(url)
        .map_err(|error| DbErr::Conn(sea_orm::RuntimeErr::Internal(error.to_string())))?;
    Database::connect(options).await
}

/// A database URL whose scheme the outbox does not support.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the outbox runs on PostgreSQL (`postgres://`, `postgresql://`) and SQLite (`sqlite:`), \
     not `{scheme}:` URLs"
)]
pub struct UnsupportedUrl {
    /// The URL's scheme.
    pub scheme: String,
}

crate::error_debug::debug_with_message!(UnsupportedUrl);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_choose_the_backend_and_others_are_refused_without_the_password() {
        for url in [
            "postgres://u:secret@localhost/app",
            "postgresql://localhost/app",
            "sqlite://app.sqlite?mode=rwc",
            "sqlite::memory:",
        ] {
            assert!(connect_options(url).is_ok(), "{url}");
        }
        let error = connect_options("mysql://u:secret@localhost/app").unwrap_err();
        assert_eq!(error.scheme, "mysql");
        assert!(!error.to_string().contains("secret"), "{error}");
        let debug = format!("{error:?}");
        assert!(
            debug.contains("the outbox runs on PostgreSQL") && !debug.contains("secret"),
            "{debug}"
        );
    }
}
