//! A throwaway PostgreSQL cluster shared by every test process of a machine,
//! and the private clusters some tests start for themselves.
//!
//! The shared cluster's life, all under the exclusive `lock` file of its
//! folder:
//!
//! - a process's first [`admin_url`] joins it: registers the process as a
//!   user ([`cluster_users`](super::cluster_users)), runs `initdb` if the
//!   folder has no data yet (once per folder), and starts the server if it is
//!   not running;
//! - at exit (an `atexit(3)` handler), the process leaves; the last live user
//!   drops the databases left behind (by failing tests) and stops the server
//!   (`pg_ctl stop -m fast`), unless `OUTBOX_TEST_KEEP_CLUSTER` is set. The
//!   data folder stays: the next test process pays a `pg_ctl start`, not an
//!   `initdb`.
//!
//! A private cluster ([`start_cluster_at`]) that its process did not stop
//! ([`stop_cluster_at`]) is stopped and removed at exit, unless
//! `OUTBOX_TEST_KEEP_CLUSTER` is set.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, Once, OnceLock, PoisonError};

use fs2::FileExt;

use super::cluster_users::{self, ClusterUser};
use super::{cleanup, keep_cluster, TestDbError};

/// The URL of a PostgreSQL server on which tests may create databases:
/// `DATABASE_URL` when set, else the shared throwaway test cluster (joined,
/// and started if needed, on the first call of the process).
///
/// # Errors
///
/// [`TestDbError`] when the cluster cannot be started; the message says why.
pub fn admin_url() -> Result<String, TestDbError> {
    static URL: OnceLock<Result<String, String>> = OnceLock::new();
    URL.get_or_init(|| match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => Ok(url),
        _ => join_shared_cluster().map_err(|e| e.0),
    })
    .clone()
    .map_err(TestDbError)
}

/// Where the shared test cluster lives: `OUTBOX_TEST_PG_DIR`, or a folder in
/// the system temp directory.
pub fn cluster_dir() -> PathBuf {
    match std::env::var_os("OUTBOX_TEST_PG_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::temp_dir().join("outbox-test-pg"),
    }
}

/// Stops the shared test cluster (if running) and deletes it, whoever uses it.
///
/// # Errors
///
/// [`TestDbError`] when the folder cannot be removed.
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
    locked(&PRIVATE_CLUSTERS).retain(|private| private != &dir);
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
    restart_cluster_in_mode(dir, "fast")
}

/// Restarts the cluster in `dir` the way a crash does (`pg_ctl restart -m
/// immediate`): the server stops without a checkpoint, every connection is
/// cut, and the restarted server recovers from its write-ahead log. With a
/// cluster started `durable`, every committed transaction survives.
///
/// # Errors
///
/// [`TestDbError`] when `pg_ctl` fails.
pub fn crash_restart_cluster_at(dir: &Path) -> Result<(), TestDbError> {
    restart_cluster_in_mode(dir, "immediate")
}

fn restart_cluster_in_mode(dir: &Path, mode: &str) -> Result<(), TestDbError> {
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
            .args(["-m", mode, "-w", "-t", "60"]),
    )
}

/// Starts (or reuses) a private throwaway cluster in `dir` and returns its
/// admin URL. Stop it with [`stop_cluster_at`]; if the process exits first
/// (a failing test), it is stopped and removed then, unless
/// `OUTBOX_TEST_KEEP_CLUSTER` is set.
///
/// `durable = false` turns fsync and synchronous commit off, for fast tests;
/// `durable = true` keeps PostgreSQL's defaults, for benchmarks.
///
/// # Errors
///
/// [`TestDbError`] when the binaries are missing or the server does not start.
pub fn start_cluster_at(dir: &Path, durable: bool) -> Result<String, TestDbError> {
    let dir = dir.to_path_buf();
    {
        let mut private = locked(&PRIVATE_CLUSTERS);
        if !private.contains(&dir) {
            private.push(dir.clone());
        }
    }
    register_exit_handler();
    with_cluster_lock(&dir, || ensure_running(&dir, durable))
}

/// The shared cluster as this process uses it.
struct SharedClusterUse {
    dir: PathBuf,
    admin: String,
    user: ClusterUser,
}

static SHARED_CLUSTER: Mutex<Option<SharedClusterUse>> = Mutex::new(None);
static PRIVATE_CLUSTERS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether `url` names a database of the shared cluster this process uses.
pub(crate) fn on_shared_cluster(url: &str) -> bool {
    locked(&SHARED_CLUSTER).as_ref().is_some_and(|shared| {
        let server = |url: &str| url.rsplit_once('/').map(|(server, _)| server.to_owned());
        server(url).is_some() && server(url) == server(&shared.admin)
    })
}

fn join_shared_cluster() -> Result<String, TestDbError> {
    let dir = cluster_dir();
    register_exit_handler();
    let (user, admin) = join_cluster_at(&dir)?;
    *locked(&SHARED_CLUSTER) = Some(SharedClusterUse {
        dir,
        admin: admin.clone(),
        user,
    });
    Ok(admin)
}

/// Registers a user of the cluster in `dir` and makes sure it runs.
pub(crate) fn join_cluster_at(dir: &Path) -> Result<(ClusterUser, String), TestDbError> {
    with_cluster_lock(dir, || {
        let users = dir.join("users");
        let user = cluster_users::join(&users).map_err(|e| io_error(&users, e))?;
        // On an error, `user` drops: the process does not stay registered.
        let admin = ensure_running(dir, false)?;
        Ok((user, admin))
    })
}

/// What leaving a cluster did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Left {
    /// Other users remain: the server runs on.
    InUse,
    /// The last user left, but `OUTBOX_TEST_KEEP_CLUSTER` keeps the server.
    Kept,
    /// The last user left: leftover databases dropped, server stopped.
    Stopped,
    /// The last user left a server that was not running.
    NotRunning,
}

/// Unregisters `user` from the cluster in `dir`; the last one out drops the
/// leftover databases and stops the server, unless `keep`.
pub(crate) fn leave_cluster_at(
    dir: &Path,
    user: ClusterUser,
    keep: bool,
) -> Result<Left, TestDbError> {
    with_cluster_lock(dir, || {
        user.leave();
        let users = dir.join("users");
        let live = cluster_users::live_users(&users).map_err(|e| io_error(&users, e))?;
        let data = dir.join("data");
        if live > 0 {
            return Ok(Left::InUse);
        }
        if keep {
            return Ok(Left::Kept);
        }
        if !data.join("PG_VERSION").exists() || !is_running(&data)? {
            return Ok(Left::NotRunning);
        }
        let dropped = match fs::read_to_string(dir.join("port")) {
            Ok(port) => cleanup::drop_all_databases(&admin_url_for(port.trim())),
            Err(e) => Err(io_error(&dir.join("port"), e)),
        };
        let pg_ctl = binary("pg_ctl")?;
        run_as_postgres(
            Command::new(pg_ctl)
                .arg("stop")
                .arg("-D")
                .arg(&data)
                .args(["-m", "fast", "-w", "-t", "60"]),
        )?;
        dropped.map(|()| Left::Stopped)
    })
}

fn admin_url_for(port: &str) -> String {
    format!("postgres://postgres@127.0.0.1:{port}/postgres")
}

/// Runs `f` holding the exclusive lock of the cluster in `dir`.
fn with_cluster_lock<T>(
    dir: &Path,
    f: impl FnOnce() -> Result<T, TestDbError>,
) -> Result<T, TestDbError> {
    fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    let lock_path = dir.join("lock");
    let lock = File::create(&lock_path).map_err(|e| io_error(&lock_path, e))?;
    lock.lock_exclusive().map_err(|e| io_error(&lock_path, e))?;
    let result = f();
    let _ = FileExt::unlock(&lock);
    result
}

#[allow(unsafe_code)]
fn register_exit_handler() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: atexit(3) only records the address of `leave_clusters_at_exit`,
        // a C-ABI function without arguments that lives as long as the program
        // and never unwinds (it catches panics).
        let status = unsafe { libc::atexit(leave_clusters_at_exit) };
        if status != 0 {
            eprintln!(
                "outbox test harness: atexit failed; the test clusters this process \
                 starts will keep running after it"
            );
        }
    });
}

extern "C" fn leave_clusters_at_exit() {
    let _ = std::panic::catch_unwind(leave_clusters);
}

/// Leaves the shared cluster (the last user stops it) and stops the private
/// clusters nobody stopped, unless `OUTBOX_TEST_KEEP_CLUSTER` is set.
fn leave_clusters() {
    let keep = keep_cluster();
    let shared = locked(&SHARED_CLUSTER).take();
    if let Some(SharedClusterUse { dir, admin, user }) = shared {
        match leave_cluster_at(&dir, user, keep) {
            Ok(Left::Kept) => eprintln!(
                "outbox test harness: the test cluster keeps running \
                 (OUTBOX_TEST_KEEP_CLUSTER): {admin} (data in {})",
                dir.display()
            ),
            Ok(_) => {}
            Err(error) => eprintln!("outbox test harness: leaving the test cluster: {}", error.0),
        }
    }
    let private = std::mem::take(&mut *locked(&PRIVATE_CLUSTERS));
    for dir in private {
        if keep {
            eprintln!(
                "outbox test harness: a private test cluster keeps running \
                 (OUTBOX_TEST_KEEP_CLUSTER) in {}",
                dir.display()
            );
        } else if let Err(error) = stop_cluster_at(&dir) {
            eprintln!(
                "outbox test harness: stopping a private test cluster: {}",
                error.0
            );
        }
    }
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
         -c shared_buffers=256MB{speed}{}",
        socket.display(),
        statement_statistics(&pg_ctl),
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

/// The server options that preload `pg_stat_statements` and have it track
/// every statement, nested ones too (for tests that measure what a code path
/// costs the server), when the server's library folder holds it (Debian's
/// `postgresql` package does); none otherwise, and those tests say what is
/// missing. Options of the command line, not the config file: they hold for
/// a data folder made by an older harness too, and `pg_ctl restart` keeps
/// them.
fn statement_statistics(pg_ctl: &Path) -> &'static str {
    const OPTIONS: &str =
        " -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all";
    let library = "pg_stat_statements.so";
    // `<prefix>/bin/pg_ctl` and `<prefix>/lib/pg_stat_statements.so`.
    let next_to_bin = fs::canonicalize(pg_ctl)
        .ok()
        .and_then(|bin| Some(bin.parent()?.parent()?.join("lib").join(library)));
    if next_to_bin.is_some_and(|path| path.is_file()) {
        return OPTIONS;
    }
    // Elsewhere, where `pg_config` says.
    let pkglibdir = Command::new(pg_ctl.with_file_name("pg_config"))
        .arg("--pkglibdir")
        .output()
        .or_else(|_| Command::new("pg_config").arg("--pkglibdir").output());
    match pkglibdir {
        Ok(output) if output.status.success() => {
            let dir = String::from_utf8_lossy(&output.stdout).trim().to_owned();
            if Path::new(&dir).join(library).is_file() {
                OPTIONS
            } else {
                ""
            }
        }
        _ => "",
    }
}

pub(crate) fn is_running(data: &Path) -> Result<bool, TestDbError> {
    let pg_ctl = binary("pg_ctl")?;
    let mut command = Command::new(pg_ctl);
    command.arg("status").arg("-D").arg(data);
    let status = wrap(&mut command)
        .output()
        .map_err(|e| TestDbError(format!("pg_ctl status: {e}")))?;
    Ok(status.status.success())
}

pub(super) fn free_port() -> Result<u16, TestDbError> {
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

pub(super) fn is_root() -> bool {
    libc_geteuid() == 0
}

#[allow(unsafe_code)]
fn libc_geteuid() -> u32 {
    // SAFETY: geteuid(2) takes no arguments, cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

pub(super) fn wrap(command: &mut Command) -> Command {
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

pub(super) fn run_as_postgres(command: &mut Command) -> Result<(), TestDbError> {
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

pub(super) fn chown_postgres(path: &Path) -> Result<(), TestDbError> {
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

pub(super) fn io_error(path: &Path, error: std::io::Error) -> TestDbError {
    TestDbError(format!("{}: {error}", path.display()))
}
