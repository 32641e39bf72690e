//! Slowloris: hundreds of connections that send a request head a byte at a
//! time and never finish it, while a client keeps creating organizations on
//! the same silo. The silo must close each slow connection after its
//! header-read timeout (seen on the socket: end of stream or reset), and
//! keep serving the client meanwhile: some create sent once every slow
//! connection is open is answered before the first of them is closed (a
//! silo starved by them would serve nobody until it closes some). How fast
//! it serves is measured by the `slow_clients` bench, not checked here.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::load::{Probe, ProbeOutcome};

/// The silos' header-read timeout (the example's default, `--header-timeout-ms`).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a slow connection sends its next byte.
const BYTE_EVERY: Duration = Duration::from_millis(100);
/// How long a slow connection waits to be closed before it counts as never
/// closed: four header timeouts (the close comes with the timer; the rest
/// is slack for a loaded machine).
const CLOSE_DEADLINE: Duration = Duration::from_secs(4 * HEADER_TIMEOUT.as_secs());

/// One slow connection, as its client saw it.
#[derive(Clone, Copy, Debug)]
pub struct Slow {
    /// Before its `connect`.
    pub started: Instant,
    /// When its `connect` returned; `None` if refused.
    pub connected: Option<Instant>,
    /// When the silo closed it; `None` if still open at [`CLOSE_DEADLINE`]
    /// (or refused).
    pub closed: Option<Instant>,
}

impl Slow {
    fn closed_after(&self) -> Option<Duration> {
        self.closed.map(|closed| closed - self.started)
    }
}

/// What the attack saw.
#[derive(Debug)]
pub struct Outcome {
    /// The slow connections.
    pub slow: Vec<Slow>,
    /// The client's creates meanwhile.
    pub client: ProbeOutcome,
}

impl Outcome {
    /// The slow connections closed, and the earliest and latest close (from
    /// their start).
    pub fn closes(&self) -> (usize, Duration, Duration) {
        let closed: Vec<Duration> = self.slow.iter().filter_map(Slow::closed_after).collect();
        let earliest = closed.iter().min().copied().unwrap_or_default();
        let latest = closed.iter().max().copied().unwrap_or_default();
        (closed.len(), earliest, latest)
    }

    /// The client's creates sent once every slow connection was open and
    /// answered before the first was closed.
    pub fn served_under_attack(&self) -> usize {
        let Some(all_open) = self.slow.iter().filter_map(|slow| slow.connected).max() else {
            return 0;
        };
        let first_close = self.slow.iter().filter_map(|slow| slow.closed).min();
        self.client
            .creates
            .iter()
            .filter(|(sent, answered)| {
                *sent >= all_open && first_close.is_none_or(|first| *answered <= first)
            })
            .count()
    }
}

/// One slow connection: a byte of a request head every [`BYTE_EVERY`],
/// until the silo closes it.
async fn slow_connection(addr: std::net::SocketAddr) -> Slow {
    let head = b"POST /api/0/organizations HTTP/1.1\r\nhost: slowloris\r\n\
                 content-type: application/json\r\nx-padding: ";
    let started = Instant::now();
    let Ok(mut socket) = TcpStream::connect(addr).await else {
        return Slow {
            started,
            connected: None,
            closed: None,
        };
    };
    let connected = Some(Instant::now());
    let mut bytes = head.iter().copied().chain(std::iter::repeat(b'a'));
    let mut every = tokio::time::interval(BYTE_EVERY);
    let mut buffer = [0u8; 256];
    let watched = tokio::time::timeout(CLOSE_DEADLINE, async {
        loop {
            tokio::select! {
                read = socket.read(&mut buffer) => match read {
                    // Closed (hyper may answer 408 first): read on to the end.
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                },
                _ = every.tick() => {
                    let byte = bytes.next().unwrap_or(b'a');
                    if socket.write_all(&[byte]).await.is_err() {
                        return;
                    }
                }
            }
        }
    })
    .await;
    Slow {
        started,
        connected,
        closed: watched.ok().map(|()| Instant::now()),
    }
}

/// Opens `connections` slow connections to the silo at `addr`, and
/// meanwhile creates organizations one after the other through `base` (a
/// fresh connection each) until every slow connection is closed or given
/// up on.
pub async fn attack(addr: std::net::SocketAddr, base: String, connections: usize) -> Outcome {
    let client = Probe::start(base);
    let slow: Vec<_> = (0..connections)
        .map(|_| tokio::spawn(slow_connection(addr)))
        .collect();
    let mut outcome = Vec::with_capacity(connections);
    for task in slow {
        outcome.push(task.await.unwrap());
    }
    Outcome {
        slow: outcome,
        client: client.stop().await,
    }
}

/// The scenario's checks: every slow connection closed, none before the
/// header timeout; the client served under the attack, and none of its
/// creates failed. Returns the violations and the line for the table.
pub fn check(outcome: &Outcome) -> (Vec<String>, String) {
    let mut failed = Vec::new();
    let connections = outcome.slow.len();
    let (closed, earliest, latest) = outcome.closes();
    if closed < connections {
        failed.push(format!(
            "{} of {connections} slow connections were refused or still open {CLOSE_DEADLINE:?} \
             after they started (header timeout {HEADER_TIMEOUT:?})",
            connections - closed,
        ));
    }
    // A lower bound: a loaded machine only closes later.
    if closed > 0 && earliest < HEADER_TIMEOUT {
        failed.push(format!(
            "a slow connection was closed after {earliest:?}, before the header timeout"
        ));
    }
    let served = outcome.served_under_attack();
    if served == 0 {
        failed.push(format!(
            "none of the client's {} creates was both sent once all {connections} slow \
             connections were open and answered before the first was closed ({:.1} s after it \
             started, header timeout {HEADER_TIMEOUT:?}): the slow connections starved the silo",
            outcome.client.creates.len(),
            earliest.as_secs_f64(),
        ));
    }
    for failure in outcome.client.failures.iter().take(5) {
        failed.push(format!("a create during the attack failed: {failure}"));
    }
    let client = &outcome.client;
    let line = format!(
        "slowloris: {connections} connections sending a request head a byte every {} ms; all \
         closed {:.1}–{:.1} s after they started (header timeout {} s); meanwhile {} creates \
         ({served} while every slow connection was open), p50 {:.3} s, p99 {:.3} s, max {:.3} s",
        BYTE_EVERY.as_millis(),
        earliest.as_secs_f64(),
        latest.as_secs_f64(),
        HEADER_TIMEOUT.as_secs(),
        client.creates.len(),
        client.quantile(0.5).as_secs_f64(),
        client.quantile(0.99).as_secs_f64(),
        client.quantile(1.0).as_secs_f64(),
    );
    (failed, line)
}
