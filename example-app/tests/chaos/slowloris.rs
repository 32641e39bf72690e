//! Slowloris: hundreds of connections that send a request head a byte at a
//! time and never finish it, while a client keeps creating organizations on
//! the same silo. The silo must close each slow connection after its
//! header-read timeout (seen on the socket: end of stream or reset), and
//! keep serving the client meanwhile.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The silos' header-read timeout (the example's default, `--header-timeout-ms`).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a slow connection sends its next byte.
const BYTE_EVERY: Duration = Duration::from_millis(100);
/// The bound on the client's p99 during the attack: half the header
/// timeout. A create that had to wait for slow connections to be closed (a
/// server out of sockets, tasks or accept slots) waits for that timeout, so
/// the bound tells starvation from a loaded machine (a CI run on a busy
/// host served at p99 1.08 s, well inside it).
pub const CLIENT_P99_BOUND: Duration = Duration::from_millis(2_500);
/// How long a slow connection waits to be closed before it counts as never
/// closed.
const CLOSE_DEADLINE: Duration = Duration::from_secs(20);

/// What the attack saw.
#[derive(Debug)]
pub struct Outcome {
    /// Slow connections opened.
    pub connections: usize,
    /// When each was closed by the silo, from before its `connect`; `None`
    /// for one still open at the deadline (or refused).
    pub closed_after: Vec<Option<Duration>>,
    /// The client's requests and how long each took.
    pub latencies: Vec<Duration>,
    /// The client's requests that failed.
    pub failures: Vec<String>,
}

impl Outcome {
    /// The `q` quantile of the client's latencies (0 with none).
    pub fn quantile(&self, q: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        let at = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
        sorted[at]
    }

    /// The slow connections closed, and the earliest and latest close.
    pub fn closes(&self) -> (usize, Duration, Duration) {
        let closed: Vec<Duration> = self.closed_after.iter().flatten().copied().collect();
        let earliest = closed.iter().min().copied().unwrap_or_default();
        let latest = closed.iter().max().copied().unwrap_or_default();
        (closed.len(), earliest, latest)
    }
}

/// One slow connection: a byte of a request head every [`BYTE_EVERY`],
/// until the silo closes it. Returns how long after the start of its
/// `connect` the close was seen.
async fn slow_connection(addr: std::net::SocketAddr) -> Option<Duration> {
    let head = b"POST /api/0/organizations HTTP/1.1\r\nhost: slowloris\r\n\
                 content-type: application/json\r\nx-padding: ";
    let started = Instant::now();
    let mut socket = TcpStream::connect(addr).await.ok()?;
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
    watched.ok().map(|()| started.elapsed())
}

/// Opens `connections` slow connections to the silo at `addr`, and meanwhile creates organizations one after the
/// other through `base` (a fresh connection each) until every slow
/// connection is closed or given up on.
pub async fn attack(addr: std::net::SocketAddr, base: String, connections: usize) -> Outcome {
    let slow: Vec<_> = (0..connections)
        .map(|_| tokio::spawn(slow_connection(addr)))
        .collect();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = {
        let done = done.clone();
        tokio::spawn(async move {
            let http = crate::load::client();
            let mut latencies = Vec::new();
            let mut failures = Vec::new();
            let mut n = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let slug = format!("slowloris-probe-{n}-{}", rand::random::<u32>());
                let sent = Instant::now();
                let answer = http
                    .post(format!("{base}/api/0/organizations"))
                    .json(&json!({ "slug": slug, "name": slug }))
                    .send()
                    .await;
                match answer {
                    Ok(response) if response.status() == StatusCode::CREATED => {
                        latencies.push(sent.elapsed());
                    }
                    Ok(response) => failures.push(format!("answered {}", response.status())),
                    Err(error) => failures.push(error.to_string()),
                }
            }
            (latencies, failures)
        })
    };
    let mut closed_after = Vec::with_capacity(connections);
    for task in slow {
        closed_after.push(task.await.unwrap());
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let (latencies, failures) = client.await.unwrap();
    Outcome {
        connections,
        closed_after,
        latencies,
        failures,
    }
}

/// The scenario's checks: every slow connection closed, none before the
/// header timeout nor long after it; the client's p99 under
/// [`CLIENT_P99_BOUND`] and no
/// failure. Returns the violations and the line for the table.
pub fn check(outcome: &Outcome) -> (Vec<String>, String) {
    let mut failed = Vec::new();
    let (closed, earliest, latest) = outcome.closes();
    if closed < outcome.connections {
        failed.push(format!(
            "{} of {} slow connections were still open {CLOSE_DEADLINE:?} after they started",
            outcome.connections - closed,
            outcome.connections
        ));
    }
    if closed > 0 && earliest < HEADER_TIMEOUT {
        failed.push(format!(
            "a slow connection was closed after {earliest:?}, before the header timeout"
        ));
    }
    // The close comes with the timer; a few seconds of slack for a loaded
    // machine.
    if latest > HEADER_TIMEOUT + Duration::from_secs(5) {
        failed.push(format!(
            "a slow connection was closed only after {latest:?} (header timeout {HEADER_TIMEOUT:?})"
        ));
    }
    let p99 = outcome.quantile(0.99);
    if outcome.latencies.is_empty() || p99 >= CLIENT_P99_BOUND {
        failed.push(format!(
            "the client's creates during the attack: {} served, p99 {:.3} s (bound {:.1} s)",
            outcome.latencies.len(),
            p99.as_secs_f64(),
            CLIENT_P99_BOUND.as_secs_f64()
        ));
    }
    for failure in outcome.failures.iter().take(5) {
        failed.push(format!("a create during the attack failed: {failure}"));
    }
    let line = format!(
        "slowloris: {} connections sending a request head a byte every {} ms; all closed \
         {:.1}–{:.1} s after they started (header timeout {} s); meanwhile {} creates, \
         p50 {:.3} s, p99 {:.3} s, max {:.3} s",
        outcome.connections,
        BYTE_EVERY.as_millis(),
        earliest.as_secs_f64(),
        latest.as_secs_f64(),
        HEADER_TIMEOUT.as_secs(),
        outcome.latencies.len(),
        outcome.quantile(0.5).as_secs_f64(),
        p99.as_secs_f64(),
        outcome.quantile(1.0).as_secs_f64(),
    );
    (failed, line)
}
