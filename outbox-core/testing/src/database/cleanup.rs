//! Dropping test databases on a PostgreSQL server, over one admin
//! connection of its own: used by a test database that goes away and by
//! the removal of a whole test cluster.

use std::time::Duration;

use sea_orm::sqlx::{self, Connection};

use super::TestDbError;

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
