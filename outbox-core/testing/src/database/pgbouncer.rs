//! A throwaway PgBouncer (Debian's `pgbouncer`) in front of a test server.

use std::fmt::Write as _;
use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::postgres::{chown_postgres, free_port, io_error, is_root, wrap};
use super::TestDbError;

/// How long PgBouncer may take to start or stop: 10 s.
const WAIT: Duration = Duration::from_secs(10);

/// How PgBouncer hands server connections to clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolMode {
    /// A server connection per client connection, for as long as it lasts:
    /// session state (`LISTEN`, prepared statements) works.
    Session,
    /// A server connection per transaction: session state does not survive
    /// between transactions.
    Transaction,
}

impl PoolMode {
    fn as_str(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
        }
    }
}

/// A PgBouncer started for a test, in front of one PostgreSQL server (every
/// database, trust authentication, as the throwaway cluster has). Stopped,
/// and its folder removed, when dropped.
///
/// ```no_run
/// # fn run(url: &str) -> Result<(), outbox_testing::database::TestDbError> {
/// use outbox_testing::database::{PgBouncer, PoolMode};
/// let bouncer = PgBouncer::start(url, PoolMode::Session)?;
/// let through_the_pooler = bouncer.url_for(url);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct PgBouncer {
    dir: PathBuf,
    port: u16,
    /// PgBouncer in the foreground (or `runuser`, which passes signals on).
    process: Option<Child>,
}

impl PgBouncer {
    /// Starts PgBouncer in `mode` in front of the server of `server_url`
    /// (`postgres://user@host:port/database`), on a free loopback port, as the
    /// `postgres` system user when the tests run as root (PgBouncer refuses
    /// root).
    ///
    /// # Errors
    ///
    /// [`TestDbError`] when `pgbouncer` is not installed (the message says how
    /// to install it) or does not start.
    pub fn start(server_url: &str, mode: PoolMode) -> Result<Self, TestDbError> {
        // Said before anything is written: how to install it.
        pgbouncer_binary()?;
        let (host, server_port) = host_and_port(server_url)?;
        let dir = std::env::temp_dir().join(format!(
            "outbox-test-pgbouncer-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        let port = free_port()?;
        let (user, password) = user_of(server_url);
        let mut ini = String::new();
        let _ = write!(
            ini,
            "[databases]\n\
             * = host={host} port={server_port}\n\
             \n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {dir}/userlist.txt\n\
             admin_users = {user}\n\
             pool_mode = {mode}\n\
             max_client_conn = 500\n\
             default_pool_size = 40\n\
             ignore_startup_parameters = extra_float_digits\n\
             logfile = {dir}/pgbouncer.log\n",
            dir = dir.display(),
            mode = mode.as_str(),
        );
        write_file(&dir.join("pgbouncer.ini"), &ini)?;
        // PgBouncer trusts its clients and logs in to the server as `user`.
        write_file(
            &dir.join("userlist.txt"),
            &format!("\"{user}\" \"{password}\"\n"),
        )?;
        if is_root() {
            for path in [
                dir.clone(),
                dir.join("pgbouncer.ini"),
                dir.join("userlist.txt"),
            ] {
                chown_postgres(&path)?;
            }
        }
        let mut bouncer = Self {
            dir,
            port,
            process: None,
        };
        bouncer.spawn()?;
        Ok(bouncer)
    }

    /// Stops PgBouncer (every client and server connection is cut) and
    /// starts it again on the same port, as when an operator restarts it.
    ///
    /// # Errors
    ///
    /// [`TestDbError`] when it does not start again.
    pub fn restart(&mut self) -> Result<(), TestDbError> {
        self.stop();
        self.spawn()
    }

    /// Starts the process and waits until it listens.
    fn spawn(&mut self) -> Result<(), TestDbError> {
        let binary = pgbouncer_binary()?;
        let process = wrap(Command::new(binary).arg(self.dir.join("pgbouncer.ini")))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| TestDbError(format!("cannot start pgbouncer: {e}")))?;
        self.process = Some(process);
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if started.elapsed() > WAIT {
                return Err(TestDbError(format!(
                    "pgbouncer did not listen on port {} within {WAIT:?}; see {}",
                    self.port,
                    self.dir.join("pgbouncer.log").display()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Stops the process (SIGTERM, PgBouncer's immediate shutdown; `runuser`
    /// passes it on), and waits until it has exited and its port is free.
    fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &process.id().to_string()])
                .status();
            let started = Instant::now();
            while matches!(process.try_wait(), Ok(None)) && started.elapsed() < WAIT {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = process.kill();
            let _ = process.wait();
        }
    }

    /// The port PgBouncer listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `url` (a URL of the server behind PgBouncer) with PgBouncer's host and
    /// port instead.
    pub fn url_for(&self, url: &str) -> String {
        let Some((scheme, rest)) = url.split_once("://") else {
            return url.to_owned();
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let user = authority
            .rsplit_once('@')
            .map(|(user, _)| format!("{user}@"))
            .unwrap_or_default();
        format!("{scheme}://{user}127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn pgbouncer_binary() -> Result<PathBuf, TestDbError> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/local/sbin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|dir| dir.join("pgbouncer"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            TestDbError(
                "`pgbouncer` was not found on PATH or in /usr/sbin: install it \
                 (`apt-get install -y pgbouncer`; scripts/test.sh does)"
                    .to_owned(),
            )
        })
}

fn write_file(path: &Path, text: &str) -> Result<(), TestDbError> {
    fs::write(path, text).map_err(|e| io_error(path, e))
}

/// The host and port of a `postgres://user@host:port/db` URL.
pub(super) fn host_and_port(url: &str) -> Result<(String, u16), TestDbError> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let (host, port) = host_port.rsplit_once(':').unwrap_or((host_port, "5432"));
    let port = port
        .parse()
        .map_err(|_| TestDbError(format!("no port in {url}")))?;
    Ok((host.to_owned(), port))
}

/// The user and password of a `postgres://user:password@host/db` URL
/// (default `postgres`, no password).
fn user_of(url: &str) -> (String, String) {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    let Some((credentials, _)) = authority.rsplit_once('@') else {
        return ("postgres".to_owned(), String::new());
    };
    let (user, password) = credentials.split_once(':').unwrap_or((credentials, ""));
    (user.to_owned(), password.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_taken_apart_and_pointed_at_the_pooler() {
        let url = "postgres://postgres@127.0.0.1:5433/t_x?sslmode=disable";
        assert_eq!(host_and_port(url).unwrap(), ("127.0.0.1".to_owned(), 5433));
        assert_eq!(user_of(url), ("postgres".to_owned(), String::new()));
        assert_eq!(
            user_of("postgres://ann:secret@db:5432/app").1,
            "secret".to_owned()
        );
        let bouncer = PgBouncer {
            dir: PathBuf::from("/nonexistent"),
            port: 6432,
            process: None,
        };
        assert_eq!(
            bouncer.url_for(url),
            "postgres://postgres@127.0.0.1:6432/t_x?sslmode=disable"
        );
    }
}
