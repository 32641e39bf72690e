//! The suite's own PostgreSQL server (durable: every acknowledged commit
//! survives a crash restart), its databases, and the faults it suffers.

use std::path::PathBuf;
use std::time::Duration;

use outbox_testing::database::{
    connect, crash_restart_cluster_at, start_cluster_at, stop_cluster_at, PgBouncer, PoolMode,
};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};

/// A private cluster, stopped and removed when dropped.
pub struct Postgres {
    dir: PathBuf,
    admin: String,
}

impl Postgres {
    /// Starts a cluster of its own: the suite restarts it, which would cut
    /// every other test's connections on a shared one.
    pub async fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("outbox-chaos-pg-{}", std::process::id()));
        let admin = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || start_cluster_at(&dir, true))
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("chaos suite: {e}"))
        };
        Self { dir, admin }
    }

    /// Three empty databases (control, us, de; the silos migrate them),
    /// with a connection pool each for the checks. They go with the
    /// cluster.
    pub async fn databases(&self, scenario: &str) -> Vec<(String, DatabaseConnection)> {
        let admin = connect(&self.admin, 1).await.unwrap();
        let mut databases = Vec::new();
        for silo in crate::silos::SILOS {
            let name = format!("chaos_{scenario}_{silo}");
            admin
                .execute_unprepared(&format!("CREATE DATABASE {name}"))
                .await
                .unwrap();
            let url = format!("{}/{name}", self.admin.rsplit_once('/').unwrap().0);
            let pool = connect(&url, 2).await.unwrap();
            databases.push((url, pool));
        }
        admin.close().await.unwrap();
        databases
    }

    /// `pg_ctl restart -m immediate`: the server stops as in a crash and
    /// recovers from its write-ahead log.
    pub async fn crash_restart(&self) {
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || crash_restart_cluster_at(&dir))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("chaos suite: {e}"));
    }

    /// Terminates every client backend connected to `databases` (by URL);
    /// returns how many.
    pub async fn terminate_backends(&self, databases: &[String]) -> u64 {
        // Our own generated names: letters, digits and underscores.
        let names: Vec<String> = databases
            .iter()
            .map(|url| format!("'{}'", url.rsplit_once('/').unwrap().1))
            .collect();
        let Ok(admin) = connect(&self.admin, 1).await else {
            return 0;
        };
        let terminated = admin
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                format!(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n \
                     FROM pg_stat_activity WHERE pid <> pg_backend_pid() \
                     AND backend_type = 'client backend' AND datname IN ({})",
                    names.join(", ")
                ),
            ))
            .await
            .ok()
            .flatten()
            .and_then(|row| row.try_get::<i64>("", "n").ok())
            .unwrap_or(0);
        let _ = admin.close().await;
        terminated.try_into().unwrap_or(0)
    }

    /// How many backends wait on a lock that a backend of `pids` holds.
    pub async fn blocked_by(&self, pids: &[i32]) -> i64 {
        let pids: Vec<String> = pids.iter().map(i32::to_string).collect();
        let Ok(admin) = connect(&self.admin, 1).await else {
            return 0;
        };
        let blocked = admin
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                format!(
                    "SELECT count(*) AS n FROM pg_stat_activity \
                     WHERE pg_blocking_pids(pid) && ARRAY[{}]::int[]",
                    pids.join(", ")
                ),
            ))
            .await
            .ok()
            .flatten()
            .and_then(|row| row.try_get::<i64>("", "n").ok())
            .unwrap_or(0);
        let _ = admin.close().await;
        blocked
    }

    /// PgBouncer in session mode in front of this server.
    pub async fn pgbouncer(&self) -> PgBouncer {
        let admin = self.admin.clone();
        tokio::task::spawn_blocking(move || PgBouncer::start(&admin, PoolMode::Session))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("chaos suite: {e}"))
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = stop_cluster_at(&self.dir);
    }
}

/// A session that holds locks, idle in transaction, until released.
pub struct Locker {
    db: DatabaseConnection,
    /// Its backend's process id.
    pub pid: i32,
}

impl Locker {
    /// Opens a session on `url` and runs `statements` in a transaction left
    /// open.
    pub async fn hold(url: &str, statements: &[&str]) -> Self {
        let db = connect(url, 1).await.unwrap();
        db.execute_unprepared("BEGIN").await.unwrap();
        for statement in statements {
            db.execute_unprepared(statement).await.unwrap();
        }
        let pid = db
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                "SELECT pg_backend_pid() AS pid",
            ))
            .await
            .unwrap()
            .unwrap()
            .try_get::<i32>("", "pid")
            .unwrap();
        Self { db, pid }
    }

    /// Rolls back and closes the session.
    pub async fn release(self) {
        let _ = self.db.execute_unprepared("ROLLBACK").await;
        let _ = self.db.close().await;
    }
}

/// Runs `query` until it succeeds (the server may be restarting, the
/// connection terminated), for up to a minute.
pub async fn query_all(db: &DatabaseConnection, sql: &str) -> Vec<sea_orm::QueryResult> {
    let mut last = None;
    for _ in 0..600 {
        match db
            .query_all_raw(Statement::from_string(DbBackend::Postgres, sql))
            .await
        {
            Ok(rows) => return rows,
            Err(error) => last = Some(error),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("chaos suite: {sql}: {last:?}");
}
