//! A PostgreSQL wire-protocol statement counter, for tests that hold a code
//! path to a budget of statements and round trips.
//!
//! [`StatementCounter`] is a loopback TCP proxy in front of a PostgreSQL
//! server. A pool connects through it ([`StatementCounter::url`]); it
//! forwards every byte unchanged both ways and reads the frontend side of
//! each connection (what the client sends):
//!
//! - every statement executed, in order: a simple `Query` by its text, an
//!   extended-protocol `Execute` by the SQL its portal was bound to
//!   (`Bind` names the prepared statement, `Parse` gives its SQL; sqlx names
//!   its statements and caches them per connection, the unnamed statement
//!   `""` works the same way);
//! - every round trip: each `Sync` or simple `Query` (or `FunctionCall`) ends
//!   one exchange the client waits on. A `Sync` with no statement before it
//!   still counts: sqlx's pool (0.9) pings a connection with a bare `Sync`
//!   when it hands it out (`test_before_acquire`, on by default) and again
//!   when it takes it back, and preparing a statement the first time
//!   (`Parse`, `Describe`, `Sync`) costs a round trip of its own.
//!
//! The ping of a returned connection runs in a task of its own, after the
//! work that used the connection has finished: wait for [`pool_idle`]
//! before a [`snapshot`](StatementCounter::snapshot) (and before a
//! [`reset`](StatementCounter::reset)), or it lands in the next one.
//!
//! Statements carry a short [`label`]: the file name for the
//! PostgreSQL store's own SQL (`region/claim_shard.sql`), the leading
//! `-- …` comment for other commented SQL, the verb and table of an
//! `INSERT`, `UPDATE` or `DELETE` (`INSERT INTO widgets`), and otherwise the
//! first line (`BEGIN`).
//!
//! ```no_run
//! # async fn run(url: &str) -> Result<(), Box<dyn std::error::Error>> {
//! use outbox_testing::database::connect;
//! use outbox_testing::database::wire::{pool_idle, StatementCounter};
//! use sea_orm::ConnectionTrait;
//!
//! let counter = StatementCounter::start(url).await?;
//! let db = connect(&counter.url(), 5).await?;
//! db.execute_unprepared("SELECT 1").await?;
//! pool_idle(&db).await?;
//! counter.reset();
//! db.execute_unprepared("SELECT 2").await?;
//! pool_idle(&db).await?;
//! let seen = counter.snapshot();
//! assert_eq!(seen.labels(), ["SELECT 2"]);
//! // The pool's ping when it handed the connection out, the query, the
//! // pool's ping when it took the connection back.
//! assert_eq!(seen.round_trips(), 3);
//! assert_eq!(seen.round_trips_without_statement(), 2);
//! # Ok(()) }
//! ```
//!
//! What it cannot read: a connection that upgrades to TLS or GSS encryption
//! (the proxy passes it through and counts nothing; use `sslmode=disable`
//! or a server without TLS, as the throwaway test clusters are), and a
//! client that pipelines several `Sync`s before it waits (each counts as a
//! round trip, where the client waited once).

mod label;
mod protocol;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use sea_orm::{DatabaseConnection, DbBackend};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

pub use label::label;
use protocol::{FrontendParser, StartupKind};

use super::pgbouncer::host_and_port;
use super::TestDbError;

/// One statement a client had the server execute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutedStatement {
    /// The proxied connection it ran on (numbered from 1 in the order the
    /// proxy accepted them).
    pub connection: u64,
    /// A short name for it (see [`label`]).
    pub label: Arc<str>,
    /// Its SQL text, as sent.
    pub sql: Arc<str>,
    /// How it was sent.
    pub protocol: Protocol,
}

/// How a statement was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// A simple `Query` message (text; may hold several statements), or a
    /// `FunctionCall` (labelled `(FunctionCall)`, no text).
    Simple,
    /// `Execute` of a portal bound to a prepared statement.
    Extended,
}

/// What one proxied connection sent since the last reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnectionCounts {
    /// Statements executed.
    pub statements: u64,
    /// Round trips (`Sync`, `Query`, `FunctionCall`).
    pub round_trips: u64,
    /// Of those, round trips that executed no statement: the pool's
    /// pings, a `Parse` that prepares a statement the first time, a `Close`
    /// of an evicted one.
    pub round_trips_without_statement: u64,
    /// Statements prepared (`Parse`): sqlx prepares a statement the first
    /// time a connection runs it, in a round trip of its own.
    pub prepared: u64,
}

/// What the clients sent since the last [`StatementCounter::reset`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WireSnapshot {
    /// Every statement, in the order the proxy read them (across connections).
    pub statements: Vec<ExecutedStatement>,
    /// Per connection that sent anything.
    pub connections: BTreeMap<u64, ConnectionCounts>,
    /// Connections the proxy accepted (clients opened).
    pub connections_opened: u64,
    /// Connections whose messages the proxy could not read (TLS, GSS, a
    /// protocol error): their statements are missing above.
    pub unreadable_connections: Vec<u64>,
}

impl WireSnapshot {
    /// The labels of [`statements`](Self::statements), in order.
    pub fn labels(&self) -> Vec<&str> {
        self.statements.iter().map(|s| &*s.label).collect()
    }

    /// Round trips of every connection.
    pub fn round_trips(&self) -> u64 {
        self.connections.values().map(|c| c.round_trips).sum()
    }

    /// Round trips that executed no statement, of every connection.
    pub fn round_trips_without_statement(&self) -> u64 {
        self.connections
            .values()
            .map(|c| c.round_trips_without_statement)
            .sum()
    }

    /// Statements prepared (`Parse`), on every connection.
    pub fn prepared(&self) -> u64 {
        self.connections.values().map(|c| c.prepared).sum()
    }
}

#[derive(Default)]
struct Recording {
    next_connection: u64,
    snapshot: WireSnapshot,
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Recording>>);

impl Recorder {
    fn lock(&self) -> MutexGuard<'_, Recording> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn new_connection(&self) -> u64 {
        let mut recording = self.lock();
        recording.next_connection += 1;
        recording.snapshot.connections_opened += 1;
        recording.next_connection
    }

    fn prepared(&self, connection: u64) {
        let mut recording = self.lock();
        let counts = recording
            .snapshot
            .connections
            .entry(connection)
            .or_default();
        counts.prepared += 1;
    }

    fn statement(&self, statement: ExecutedStatement) {
        let mut recording = self.lock();
        let counts = recording
            .snapshot
            .connections
            .entry(statement.connection)
            .or_default();
        counts.statements += 1;
        recording.snapshot.statements.push(statement);
    }

    fn round_trip(&self, connection: u64, with_statement: bool) {
        let mut recording = self.lock();
        let counts = recording
            .snapshot
            .connections
            .entry(connection)
            .or_default();
        counts.round_trips += 1;
        if !with_statement {
            counts.round_trips_without_statement += 1;
        }
    }

    fn unreadable(&self, connection: u64) {
        self.lock().snapshot.unreadable_connections.push(connection);
    }
}

/// A loopback proxy in front of a PostgreSQL server that records the
/// statements and round trips of every connection through it (see the
/// [module documentation](self)). Stops, cutting its connections, when
/// dropped.
pub struct StatementCounter {
    server_url: String,
    address: SocketAddr,
    recorder: Recorder,
    accept: JoinHandle<()>,
}

impl std::fmt::Debug for StatementCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatementCounter")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl StatementCounter {
    /// Starts the proxy on a free loopback port, in front of the server of
    /// `server_url` (`postgres://user@host:port/database`). Call it inside
    /// a Tokio runtime: the proxy runs on it.
    ///
    /// # Errors
    ///
    /// [`TestDbError`] when the URL has no usable port or no loopback port
    /// is free.
    pub async fn start(server_url: &str) -> Result<Self, TestDbError> {
        let (host, port) = host_and_port(server_url)?;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| TestDbError(format!("statement counter: no loopback port: {e}")))?;
        let address = listener
            .local_addr()
            .map_err(|e| TestDbError(format!("statement counter: {e}")))?;
        let recorder = Recorder::default();
        let accept = tokio::spawn(accept_loop(listener, (host, port), recorder.clone()));
        Ok(Self {
            server_url: server_url.to_owned(),
            address,
            recorder,
            accept,
        })
    }

    /// The URL of `start`'s database, through the proxy.
    pub fn url(&self) -> String {
        self.url_for(&self.server_url)
    }

    /// `url` (a database of the same server) pointed at the proxy.
    pub fn url_for(&self, url: &str) -> String {
        let Some((scheme, rest)) = url.split_once("://") else {
            return url.to_owned();
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let user = authority
            .rsplit_once('@')
            .map(|(user, _)| format!("{user}@"))
            .unwrap_or_default();
        format!("{scheme}://{user}{}{path}", self.address)
    }

    /// The proxy's address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Forgets what was recorded. Connections and what they prepared stay
    /// known, so a statement prepared before the reset is still named
    /// after it.
    pub fn reset(&self) {
        let mut recording = self.recorder.lock();
        recording.snapshot = WireSnapshot::default();
    }

    /// What was recorded since the last reset. Every message a client sent
    /// before it got a reply is in it: the proxy records a message before
    /// it forwards it.
    pub fn snapshot(&self) -> WireSnapshot {
        self.recorder.lock().snapshot.clone()
    }
}

impl Drop for StatementCounter {
    fn drop(&mut self) {
        // Dropping the accept loop drops its JoinSet: every connection ends.
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, server: (String, u16), recorder: Recorder) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                let id = recorder.new_connection();
                let server = server.clone();
                let recorder = recorder.clone();
                connections.spawn(async move {
                    if let Err(error) = proxy(client, &server, id, &recorder).await {
                        tracing::debug!(%error, connection = id, "statement counter: connection ended");
                    }
                });
            }
            // Reap finished connections as they end.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// How long [`pool_idle`] waits at most: 30 s.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Waits until every connection of `db`'s pool (PostgreSQL) is back in it,
/// idle. sqlx pings a connection the pool takes back (one round trip) in a
/// task of its own, after the work that used it has finished; once the
/// pool is idle, those pings have been answered, and so are in a
/// [`StatementCounter`]'s snapshot. Checks every millisecond.
///
/// # Errors
///
/// [`TestDbError`] when `db` is not a PostgreSQL pool, or a connection is
/// still in use after 30 s (the message says how many).
pub async fn pool_idle(db: &DatabaseConnection) -> Result<(), TestDbError> {
    if db.get_database_backend() != DbBackend::Postgres {
        return Err(TestDbError("pool_idle: not a PostgreSQL pool".to_owned()));
    }
    let pool = db.get_postgres_connection_pool();
    let deadline = Instant::now() + IDLE_TIMEOUT;
    loop {
        let (size, idle) = (pool.size() as usize, pool.num_idle());
        if idle >= size {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(TestDbError(format!(
                "pool_idle: {} of {size} connections still in use after {IDLE_TIMEOUT:?} \
                 (something still holds one)",
                size - idle
            )));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The largest startup packet accepted (PostgreSQL's own limit is 10,000).
const MAX_STARTUP_PACKET: usize = 10_000;

async fn proxy(
    mut client: TcpStream,
    server: &(String, u16),
    id: u64,
    recorder: &Recorder,
) -> std::io::Result<()> {
    let mut upstream = TcpStream::connect((server.0.as_str(), server.1)).await?;
    client.set_nodelay(true)?;
    upstream.set_nodelay(true)?;

    // The startup phase, one packet at a time: an SSL or GSS encryption
    // request gets a one-byte answer from the server before the client sends
    // anything else, and past a "yes" the stream is encrypted.
    let readable = loop {
        let packet = read_startup_packet(&mut client).await?;
        upstream.write_all(&packet).await?;
        match StartupKind::of(&packet) {
            StartupKind::EncryptionRequest => {
                let mut answer = [0u8; 1];
                upstream.read_exact(&mut answer).await?;
                client.write_all(&answer).await?;
                if answer[0] != b'N' {
                    recorder.unreadable(id);
                    break false;
                }
            }
            // Nothing but the cancel request is sent on its connection.
            StartupKind::Cancel => break false,
            StartupKind::Startup => break true,
        }
    };

    // Each direction owns its halves: when one ends (or fails), dropping
    // its write half shuts that side down, and the other direction ends in
    // turn.
    let (mut client_read, mut client_write) = client.into_split();
    let (mut upstream_read, mut upstream_write) = upstream.into_split();
    let downstream = async move {
        let copied = tokio::io::copy(&mut upstream_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
        copied.map(|_| ())
    };
    let upstream = async move {
        let mut parser = readable.then(FrontendParser::default);
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = client_read.read(&mut buffer).await?;
            if read == 0 {
                let _ = upstream_write.shutdown().await;
                return Ok::<(), std::io::Error>(());
            }
            // Recorded before it is forwarded: the server cannot answer a
            // message, and so the client cannot see its effect, before the
            // proxy has counted it.
            if let Some(reader) = parser.as_mut() {
                if reader.feed(&buffer[..read], id, recorder).is_err() {
                    recorder.unreadable(id);
                    parser = None;
                }
            }
            upstream_write.write_all(&buffer[..read]).await?;
        }
    };
    let (down, up) = tokio::join!(downstream, upstream);
    down.and(up)
}

async fn read_startup_packet(client: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut length = [0u8; 4];
    client.read_exact(&mut length).await?;
    let length = u32::from_be_bytes(length) as usize;
    if !(8..=MAX_STARTUP_PACKET).contains(&length) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("startup packet of {length} bytes"),
        ));
    }
    let mut packet = vec![0u8; length];
    packet[..4].copy_from_slice(&(length as u32).to_be_bytes());
    client.read_exact(&mut packet[4..]).await?;
    Ok(packet)
}

#[cfg(test)]
mod tests;
