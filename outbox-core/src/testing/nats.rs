//! A throwaway `nats-server` with JetStream, started by the tests
//! themselves: on a free loopback port, its store in a temp folder, stopped
//! and removed on drop. Needs Debian's `nats-server` (`apt-get install
//! nats-server`); `scripts/test.sh` installs it when missing.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use outbox_core::testing::nats::NatsServer;
//!
//! let mut server = NatsServer::start().await?;
//! let client = async_nats::connect(server.url()).await?;
//! server.restart().await?; // killed, then started again on the same port and store
//! # drop(client);
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

/// How long a start may take before it is an error.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A `nats-server -js` of the tests' own. Killed and its store removed on drop.
#[derive(Debug)]
pub struct NatsServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

/// The server could not start.
#[derive(Debug, thiserror::Error)]
pub enum NatsServerError {
    /// No `nats-server` binary.
    #[error(
        "nats-server not found (looked in PATH and /usr/sbin, /usr/bin): \
         install it with `apt-get install -y nats-server` (scripts/test.sh does)"
    )]
    NotInstalled,
    /// Starting it, or its temp folder, failed.
    #[error("nats-server: {0}")]
    Io(#[from] std::io::Error),
    /// It did not accept connections in time (its output is included).
    #[error(
        "nats-server did not accept connections on port {port} within {START_TIMEOUT:?}: {output}"
    )]
    NotReady {
        /// Its port.
        port: u16,
        /// What it printed.
        output: String,
    },
}

fn binary() -> Result<PathBuf, NatsServerError> {
    let from_path = std::env::var_os("PATH").into_iter().flat_map(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("nats-server"))
            .collect::<Vec<_>>()
    });
    from_path
        .chain(["/usr/sbin/nats-server", "/usr/bin/nats-server"].map(PathBuf::from))
        .find(|candidate| candidate.is_file())
        .ok_or(NatsServerError::NotInstalled)
}

impl NatsServer {
    /// Starts a server with JetStream on a free loopback port and waits
    /// until it accepts connections.
    ///
    /// # Errors
    ///
    /// [`NatsServerError`]; never silently skipped.
    pub async fn start() -> Result<Self, NatsServerError> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let dir = std::env::temp_dir().join(format!(
            "outbox-nats-{}-{port}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir)?;
        let mut server = Self {
            child: None,
            port,
            dir,
        };
        server.spawn().await?;
        Ok(server)
    }

    /// `nats://127.0.0.1:{port}`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The folder of its JetStream store.
    pub fn store_dir(&self) -> &Path {
        &self.dir
    }

    /// Kills it (SIGKILL) and waits for it to exit; its store stays.
    ///
    /// # Errors
    ///
    /// When it cannot be killed.
    pub async fn kill(&mut self) -> Result<(), NatsServerError> {
        if let Some(mut child) = self.child.take() {
            child.kill().await?;
        }
        Ok(())
    }

    /// Kills it and starts it again on the same port and store.
    ///
    /// # Errors
    ///
    /// [`NatsServerError`].
    pub async fn restart(&mut self) -> Result<(), NatsServerError> {
        self.kill().await?;
        self.spawn().await
    }

    async fn spawn(&mut self) -> Result<(), NatsServerError> {
        // Its log goes to a file (a pipe nobody reads would fill and block it).
        let log = self.dir.join("server.log");
        let mut child = Command::new(binary()?)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()?;
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            // Ready once it greets a client with its INFO line.
            if let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await {
                let mut greeting = [0u8; 4];
                let read =
                    tokio::time::timeout(Duration::from_secs(2), stream.read_exact(&mut greeting))
                        .await;
                if matches!(read, Ok(Ok(_))) && &greeting == b"INFO" {
                    break;
                }
            }
            let exited = child.try_wait()?.is_some();
            if exited || tokio::time::Instant::now() > deadline {
                child.kill().await.ok();
                return Err(NatsServerError::NotReady {
                    port: self.port,
                    output: std::fs::read_to_string(&log).unwrap_or_default(),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.child = Some(child);
        Ok(())
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            // SIGKILL; tokio reaps it.
            child.start_kill().ok();
        }
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// Every message of stream `name`, in stream order (sequence by sequence;
/// a few thousand at most in a test).
///
/// # Errors
///
/// The client's error.
pub async fn read_stream(
    jetstream: &async_nats::jetstream::Context,
    name: &str,
) -> Result<Vec<async_nats::jetstream::message::StreamMessage>, async_nats::Error> {
    let mut stream = jetstream.get_stream(name).await?;
    let state = stream.info().await?.state.clone();
    let mut messages = Vec::with_capacity(usize::try_from(state.messages).unwrap_or(0));
    if state.messages == 0 {
        return Ok(messages);
    }
    for sequence in state.first_sequence..=state.last_sequence {
        messages.push(stream.get_raw_message(sequence).await?);
    }
    Ok(messages)
}
