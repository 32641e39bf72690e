//! A throwaway NATS server with JetStream, for tests of the JetStream sink
//! (`outbox-core`'s feature `nats`).
//!
//! [`NatsServer::start`] runs Debian's `nats-server` (`apt-get install -y
//! nats-server`; `scripts/test.sh` installs it) on a free loopback port, with
//! JetStream on and its store in a folder of its own under the temp
//! directory, and returns once the server answers its health check. It can
//! be killed and started again on the same port with the same store, as an
//! operator's restart or a crash would; dropping it kills the server, waits
//! for it and removes the folder, also when the test panics.
//!
//! A missing `nats-server` is an error that says how to install it: a test
//! that needs the server fails rather than skips.
//!
//! ```no_run
//! use outbox_testing::nats::NatsServer;
//!
//! # fn main() -> Result<(), outbox_testing::nats::NatsServerError> {
//! let mut server = NatsServer::start()?;
//! let url = server.url(); // nats://127.0.0.1:<port>, for async_nats::connect
//! // ... publish ...
//! server.kill(); // SIGKILL: what it had stored stays in its store folder
//! server.start_again()?; // same port, same store
//! # Ok(()) }
//! ```

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the server may take to answer its health check after a start:
/// 10 s.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// What kept a [`NatsServer`] from starting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NatsServerError {
    /// `nats-server` is not installed.
    #[error(
        "`nats-server` was not found on PATH or in /usr/sbin (or at $OUTBOX_TEST_NATS_SERVER): \
         install Debian's package (`apt-get install -y nats-server`; scripts/test.sh does)"
    )]
    NotInstalled,
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The server exited while starting.
    #[error("nats-server exited while starting ({status}); its log, {log}:\n{tail}")]
    Exited {
        /// How it exited.
        status: std::process::ExitStatus,
        /// The log file.
        log: PathBuf,
        /// The end of the log.
        tail: String,
    },
    /// The server did not answer its health check in time.
    #[error(
        "nats-server did not report healthy on port {port} within {waited:?}; its log, {log}:\n{tail}"
    )]
    NotReady {
        /// The client port.
        port: u16,
        /// How long the start waited.
        waited: Duration,
        /// The log file.
        log: PathBuf,
        /// The end of the log.
        tail: String,
    },
}

/// How many times [`NatsServer::start`] starts a server whose port another
/// process took first: 5.
const BIND_ATTEMPTS: u32 = 5;

/// A `nats-server` with JetStream enabled, started for a test (see the
/// [module documentation](self)). Killed, waited for and its folder removed
/// when dropped.
#[derive(Debug)]
pub struct NatsServer {
    dir: PathBuf,
    port: u16,
    monitor_port: u16,
    process: Option<Child>,
}

impl NatsServer {
    /// Starts `nats-server -js` on a free loopback port (and a monitoring
    /// port for its health check), with its JetStream store and its log in
    /// a new folder under the temp directory, and waits until `/healthz`
    /// answers 200 (at most [`START_TIMEOUT`]).
    ///
    /// Blocks the calling thread while it waits (polling every 20 ms).
    ///
    /// # Errors
    ///
    /// [`NatsServerError::NotInstalled`] (naming the package to install),
    /// or the server did not start: [`NatsServerError::Exited`] and
    /// [`NatsServerError::NotReady`] quote the end of its log.
    pub fn start() -> Result<Self, NatsServerError> {
        Self::start_on(free_port)
    }

    /// [`start`](Self::start) on ports from `next_port`. A port is free when
    /// `next_port` hands it out and taken again before the server binds it
    /// when another process (a test running beside this one) binds it first:
    /// the server then exits with "address already in use", and is started
    /// again on new ports, up to [`BIND_ATTEMPTS`] times in all.
    fn start_on(
        mut next_port: impl FnMut() -> Result<u16, NatsServerError>,
    ) -> Result<Self, NatsServerError> {
        // Said before anything is created: how to install it.
        binary()?;
        let mut attempt = 1;
        loop {
            let dir = std::env::temp_dir().join(format!(
                "outbox-test-nats-{}-{:08x}",
                std::process::id(),
                rand::random::<u32>()
            ));
            fs::create_dir_all(&dir).map_err(|source| NatsServerError::Io {
                what: format!("cannot create {}", dir.display()),
                source,
            })?;
            let mut server = Self {
                port: next_port()?,
                monitor_port: next_port()?,
                dir,
                process: None,
            };
            // On failure, `server` is dropped: whatever started is killed and
            // the folder removed.
            match server.start_again() {
                Ok(()) => return Ok(server),
                Err(NatsServerError::Exited { tail, .. })
                    if attempt < BIND_ATTEMPTS && tail.contains("address already in use") =>
                {
                    attempt += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// The client URL, `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client port (on 127.0.0.1); the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The JetStream store folder (`-sd`); the same across restarts.
    pub fn store_dir(&self) -> PathBuf {
        self.dir.join("store")
    }

    /// The server's log file.
    pub fn log_file(&self) -> PathBuf {
        self.dir.join("nats-server.log")
    }

    /// Whether the server process is running (started and not exited).
    pub fn is_running(&mut self) -> bool {
        self.process
            .as_mut()
            .is_some_and(|process| matches!(process.try_wait(), Ok(None)))
    }

    /// Kills the server with SIGKILL, as a crash would, and waits until it
    /// has exited. What JetStream had stored stays in the store folder
    /// (written before each acknowledgement, so a process kill loses
    /// nothing acknowledged). Does nothing when it is not running.
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }

    /// Starts the server again, on the same port with the same store (a
    /// server still running is killed first), and waits until it reports
    /// healthy: JetStream has recovered its streams by then.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_again(&mut self) -> Result<(), NatsServerError> {
        self.kill();
        let log = self.log_file();
        let process = Command::new(binary()?)
            .arg("-a")
            .arg("127.0.0.1")
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-m")
            .arg(self.monitor_port.to_string())
            .arg("-js")
            .arg("-sd")
            .arg(self.store_dir())
            .arg("-l")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| NatsServerError::Io {
                what: "cannot start nats-server".to_owned(),
                source,
            })?;
        self.process = Some(process);
        let started = Instant::now();
        loop {
            if let Some(process) = self.process.as_mut() {
                if let Ok(Some(status)) = process.try_wait() {
                    self.process = None;
                    return Err(NatsServerError::Exited {
                        status,
                        tail: tail(&log),
                        log,
                    });
                }
            }
            if healthy(self.monitor_port) {
                return Ok(());
            }
            if started.elapsed() > START_TIMEOUT {
                self.kill();
                return Err(NatsServerError::NotReady {
                    port: self.port,
                    waited: START_TIMEOUT,
                    tail: tail(&log),
                    log,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server and starts it again on the same port with the same
    /// store: [`kill`](Self::kill), then [`start_again`](Self::start_again).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn restart(&mut self) -> Result<(), NatsServerError> {
        self.kill();
        self.start_again()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Every message `stream` holds, in stream order, read with an ordered
/// consumer (the way a consumer that keeps order reads it): as many as the
/// stream's state counts when called, each awaited for at most `wait`.
///
/// # Errors
///
/// The stream does not exist, the consumer cannot be created, or a message
/// did not arrive within `wait`.
pub async fn read_stream(
    jetstream: &async_nats::jetstream::Context,
    stream: &str,
    wait: Duration,
) -> Result<Vec<async_nats::Message>, async_nats::Error> {
    use futures::StreamExt;

    let stream = jetstream.get_stream(stream).await?;
    let count = stream.get_info().await?.state.messages;
    let mut messages = Vec::new();
    if count == 0 {
        return Ok(messages);
    }
    let mut consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig::default())
        .await?
        .messages()
        .await?;
    while (messages.len() as u64) < count {
        let next = tokio::time::timeout(wait, consumer.next())
            .await
            .map_err(|_| {
                format!(
                    "the stream holds {count} messages; only {} arrived, then none within {wait:?}",
                    messages.len()
                )
            })?
            .ok_or("the ordered consumer ended")??;
        messages.push(next.message);
    }
    Ok(messages)
}

/// `nats-server`: `$OUTBOX_TEST_NATS_SERVER`, else on `PATH`, else in
/// `/usr/sbin` (where Debian puts it, not on every user's `PATH`).
fn binary() -> Result<PathBuf, NatsServerError> {
    if let Some(path) = std::env::var_os("OUTBOX_TEST_NATS_SERVER") {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(NatsServerError::NotInstalled)
        };
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/local/sbin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|dir| dir.join("nats-server"))
        .find(|candidate| candidate.is_file())
        .ok_or(NatsServerError::NotInstalled)
}

fn free_port() -> Result<u16, NatsServerError> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|source| NatsServerError::Io {
            what: "no free loopback port".to_owned(),
            source,
        })
}

/// Whether `GET /healthz` on the monitoring port answers 200 (the server
/// accepts clients and JetStream is up).
fn healthy(monitor_port: u16) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, monitor_port));
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    if stream
        .write_all(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200")
}

/// The last lines of the log, for error messages.
fn tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_server_says_how_to_install_it() {
        let text = NatsServerError::NotInstalled.to_string();
        assert!(text.contains("apt-get install -y nats-server"), "{text}");
    }

    #[test]
    fn a_port_taken_before_the_server_binds_it_is_traded_for_another() {
        // The first port handed out is held here, as a test beside this one
        // would hold it; the server starts on the next ones.
        let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let taken_port = taken.local_addr().unwrap().port();
        let mut handed = 0;
        let server = NatsServer::start_on(|| {
            handed += 1;
            if handed == 1 {
                Ok(taken_port)
            } else {
                free_port()
            }
        })
        .unwrap();
        assert_ne!(server.port(), taken_port);
        assert!(handed >= 4, "two ports for each of two starts: {handed}");
    }

    #[test]
    fn a_dropped_server_is_gone_with_its_folder() {
        let mut server = NatsServer::start().unwrap();
        assert!(server.is_running());
        let (dir, port) = (server.dir.clone(), server.port());
        server.restart().unwrap();
        assert_eq!(server.port(), port, "the same port after a restart");
        let pid = server.process.as_ref().map(Child::id).unwrap();
        drop(server);
        assert!(!dir.exists(), "{} removed", dir.display());
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "nats-server {pid} still runs"
        );
    }
}
