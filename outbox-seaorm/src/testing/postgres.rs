//! A throwaway PostgreSQL cluster shared by every test process of a machine.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use fs2::FileExt;

use super::TestDbError;

/// The URL of a PostgreSQL server on which tests may create databases:
/// `DATABASE_URL` when set, else the throwaway test cluster (started if needed).
///
/// # Errors
///
/// [`TestDbError`] when the cluster cannot be started; the message says why.
pub fn admin_url() -> Result<String, TestDbError> {
    static URL: OnceLock<Result<String, String>> = OnceLock::new();
    URL.get_or_init(|| match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => Ok(url),
        _ => start_cluster().map_err(|e| e.0),
    })
    .clone()
    .map_err(TestDbError)
}

/// Where the test cluster lives: `OUTBOX_TEST_PG_DIR`, or a folder in the
/// system temp directory.
pub fn cluster_dir() -> PathBuf {
    match std::env::var_os("OUTBOX_TEST_PG_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::temp_dir().join("outbox-test-pg"),
    }
}

/// Stops the test cluster (if running) and deletes it.
///
/// # Errors
///
/// [`TestDbError`] when `pg_ctl stop` fails.
pub fn stop_test_cluster() -> Result<(), TestDbError> {
    stop_cluster_at(&cluster_dir())
}

/// Stops the cluster in `dir` (if running) and deletes it.
///
/// # Errors
///
/// [`TestDbError`] when the folder cannot be removed.
pub fn stop_cluster_at(dir: &Path) -> Result<(), TestDbError> {
    let dir = dir.to_path_buf();
    let data = dir.join("data");
    if data.join("PG_VERSION").exists() {
        let pg_ctl = binary("pg_ctl")?;
        let _ = run_as_postgres(
            Command::new(&pg_ctl)
                .arg("stop")
                .arg("-D")
                .arg(&data)
                .args(["-m", "immediate", "-w"]),
        );
    }
    fs::remove_dir_all(&dir).map_err(|e| TestDbError(format!("{}: {e}", dir.display())))
}

/// Restarts the cluster in `dir` (`pg_ctl restart`, fast shutdown): every
/// connection to it is cut, as when a database server restarts.
///
/// # Errors
///
/// [`TestDbError`] when `pg_ctl` fails.
pub fn restart_cluster_at(dir: &Path) -> Result<(), TestDbError> {
    let pg_ctl = binary("pg_ctl")?;
    run_as_postgres(
        Command::new(pg_ctl)
            .arg("restart")
            .arg("-D")
            .arg(dir.join("data"))
            // The log file keeps the server off our pipes (or `output()`
            // would wait for them to close, forever).
            .arg("-l")
            .arg(dir.join("server.log"))
            .args(["-m", "fast", "-w", "-t", "60"]),
    )
}

fn start_cluster() -> Result<String, TestDbError> {
    start_cluster_at(&cluster_dir(), false)
}

/// Starts (or reuses) a throwaway cluster in `dir` and returns its admin URL.
///
/// `durable = false` turns fsync and synchronous commit off, for fast tests;
/// `durable = true` keeps PostgreSQL's defaults, for benchmarks.
///
/// # Errors
///
/// [`TestDbError`] when the binaries are missing or the server does not start.
pub fn start_cluster_at(dir: &Path, durable: bool) -> Result<String, TestDbError> {
    let dir = dir.to_path_buf();
    fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
    let lock_path = dir.join("lock");
    let lock = File::create(&lock_path).map_err(|e| io_error(&lock_path, e))?;
    lock.lock_exclusive().map_err(|e| io_error(&lock_path, e))?;
    let result = ensure_running(&dir, durable);
    let _ = FileExt::unlock(&lock);
    result
}

fn ensure_running(dir: &Path, durable: bool) -> Result<String, TestDbError> {
    let data = dir.join("data");
    let socket = dir.join("socket");
    let port_file = dir.join("port");
    let as_root = is_root();
    if !data.join("PG_VERSION").exists() {
        let initdb = binary("initdb")?;
        let _ = fs::remove_dir_all(&data);
        fs::create_dir_all(&data).map_err(|e| io_error(&data, e))?;
        fs::create_dir_all(&socket).map_err(|e| io_error(&socket, e))?;
        if as_root {
            chown_postgres(&data)?;
            chown_postgres(&socket)?;
            chown_postgres(dir)?;
        }
        run_as_postgres(Command::new(&initdb).arg("-D").arg(&data).args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ]))?;
    }
    if let Ok(port) = fs::read_to_string(&port_file) {
        let port = port.trim().to_owned();
        if is_running(&data)? {
            return Ok(format!("postgres://postgres@127.0.0.1:{port}/postgres"));
        }
    }
    let port = free_port()?;
    let pg_ctl = binary("pg_ctl")?;
    let speed = if durable {
        ""
    } else {
        " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    };
    let options = format!(
        "-p {port} -k {} -c listen_addresses=127.0.0.1 -c max_connections=400 \
         -c shared_buffers=256MB{speed}",
        socket.display()
    );
    run_as_postgres(
        Command::new(&pg_ctl)
            .arg("start")
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(dir.join("server.log"))
            .args(["-w", "-t", "60", "-o", &options]),
    )?;
    fs::write(&port_file, port.to_string()).map_err(|e| io_error(&port_file, e))?;
    Ok(format!("postgres://postgres@127.0.0.1:{port}/postgres"))
}

fn is_running(data: &Path) -> Result<bool, TestDbError> {
    let pg_ctl = binary("pg_ctl")?;
    let mut command = Command::new(pg_ctl);
    command.arg("status").arg("-D").arg(data);
    let status = wrap(&mut command)
        .output()
        .map_err(|e| TestDbError(format!("pg_ctl status: {e}")))?;
    Ok(status.status.success())
}

fn free_port() -> Result<u16, TestDbError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| TestDbError(format!("no free loopback port: {e}")))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| TestDbError(format!("no free loopback port: {e}")))
}

/// Finds a PostgreSQL server binary on `PATH` or in Debian's versioned folders.
pub(crate) fn binary(name: &str) -> Result<PathBuf, TestDbError> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    let mut versions: Vec<PathBuf> = fs::read_dir("/usr/lib/postgresql")
        .map(|entries| entries.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    versions.sort_by_key(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0)
    });
    for version in versions.iter().rev() {
        let candidate = version.join("bin").join(name);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(TestDbError(format!(
        "PostgreSQL's `{name}` was not found on PATH or under /usr/lib/postgresql/*/bin. \
         Install the server (`apt-get install -y postgresql`) or set DATABASE_URL to a \
         server where tests may create databases."
    )))
}

fn is_root() -> bool {
    libc_geteuid() == 0
}

#[allow(unsafe_code)]
fn libc_geteuid() -> u32 {
    // SAFETY: geteuid(2) takes no arguments, cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

fn wrap(command: &mut Command) -> Command {
    if is_root() {
        let mut wrapped = Command::new("runuser");
        wrapped.args(["-u", "postgres", "--"]);
        wrapped.arg(command.get_program());
        wrapped.args(command.get_args());
        wrapped
    } else {
        let mut same = Command::new(command.get_program());
        same.args(command.get_args());
        same
    }
}

fn run_as_postgres(command: &mut Command) -> Result<(), TestDbError> {
    let mut command = wrap(command);
    let output = command
        .output()
        .map_err(|e| TestDbError(format!("cannot run {command:?}: {e}")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(TestDbError(format!(
            "{command:?} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )))
    }
}

fn chown_postgres(path: &Path) -> Result<(), TestDbError> {
    let status = Command::new("chown")
        .arg("postgres:postgres")
        .arg(path)
        .status()
        .map_err(|e| TestDbError(format!("chown {}: {e}", path.display())))?;
    if status.success() {
        Ok(())
    } else {
        Err(TestDbError(format!(
            "chown postgres {} failed: is there a `postgres` system user? \
             (`apt-get install -y postgresql` creates it)",
            path.display()
        )))
    }
}

fn io_error(path: &Path, error: std::io::Error) -> TestDbError {
    TestDbError(format!("{}: {error}", path.display()))
}
