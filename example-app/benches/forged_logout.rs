//! A flood of forged logouts against a running silo: how long it takes,
//! what it does to the silo's memory, and whether the admin reads of an
//! operator slow down after it.
//!
//! Run with `cargo bench -p example-app --bench forged_logout`.
//!
//! Starts the example (`--silo all`, SQLite in a temp folder, an admin
//! token given) as a child process, and talks to region `us` over plain
//! HTTP/1.1 on loopback. Each forged request is `POST
//! /admin/outbox/logout` with 20 session cookies of a far expiry, a nonce
//! of their own, the operator's name and a garbage MAC.
//!
//! - **Baseline**: `OUTBOX_BENCH_READS` (default 300) sequential `GET
//!   /admin/outbox/health` with the admin token; their median and p99, and
//!   the silo's resident memory (`VmRSS`).
//! - **Flood, many addresses**: `OUTBOX_BENCH_FLOOD` (default 20,000)
//!   forged requests from 2,000 loopback addresses (`127.2.x.y`, ten each:
//!   each address stays within its allowance, so every cookie is checked),
//!   16 connections at a time.
//! - **Flood, one address**: as many again from one address (the throttle
//!   refuses all but its first ten unchecked).
//! - **After**: the reads again, from an address the flood did not use;
//!   their median and p99 as a ratio to the baseline's, and the memory the
//!   silo grew by.
//!
//! Prints a Markdown table for `docs/benchmarks.md`.

#![allow(missing_docs, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader as AsyncBufReader};
use tokio::net::{TcpSocket, TcpStream};

const TOKEN: &str = "forged-logout-bench-admin-token-0123456789abcdef";
/// Connections sending the flood at once.
const CONNECTIONS: usize = 16;
/// Loopback addresses the first flood comes from.
const ADDRESSES: usize = 2_000;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// The example, killed when dropped.
struct Silo {
    child: Child,
    us: SocketAddr,
    _data: TempDir,
}

impl Drop for Silo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Silo {
    fn start() -> Self {
        let data = std::env::temp_dir().join(format!("forged-logout-{}", std::process::id()));
        std::fs::create_dir_all(&data).unwrap();
        let data = TempDir(data);
        let mut child = Command::new(env!("CARGO_BIN_EXE_example-app"))
            .args(["--data-dir", data.0.to_str().unwrap()])
            .args(["--control-addr", "127.0.0.1:0"])
            .args(["--us-addr", "127.0.0.1:0"])
            .args(["--de-addr", "127.0.0.1:0"])
            .args(["--admin-token", TOKEN])
            .env("RUST_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut us = None;
        for line in stdout.by_ref() {
            let line = line.unwrap();
            if let Some(url) = line.strip_prefix("region us").map(str::trim) {
                us = Some(url.trim_start_matches("http://").parse().unwrap());
                break;
            }
        }
        // Its log goes on: read to the end, or its writes would fail.
        std::thread::spawn(move || stdout.for_each(drop));
        Self {
            child,
            us: us.expect("the example printed no address for region us"),
            _data: data,
        }
    }

    /// The silo's resident memory, in KiB.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }
}

/// One kept-alive HTTP/1.1 connection from `from`.
struct Connection {
    stream: AsyncBufReader<TcpStream>,
}

impl Connection {
    async fn open(to: SocketAddr, from: IpAddr) -> Self {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(from, 0)).unwrap();
        let stream = socket.connect(to).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Self {
            stream: AsyncBufReader::new(stream),
        }
    }

    /// Sends `head` (request line and headers, without the blank line) and
    /// reads the answer's status, skipping its body.
    async fn send(&mut self, head: &str) -> u16 {
        let request = format!("{head}\r\nContent-Length: 0\r\n\r\n");
        self.stream
            .get_mut()
            .write_all(request.as_bytes())
            .await
            .unwrap();
        let mut line = String::new();
        self.stream.read_line(&mut line).await.unwrap();
        let status = line.split(' ').nth(1).unwrap().parse().unwrap();
        let mut length = 0usize;
        loop {
            line.clear();
            self.stream.read_line(&mut line).await.unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await.unwrap();
        status
    }
}

fn forged_logout(host: SocketAddr, seed: usize) -> String {
    let cookies: Vec<String> = (0..20)
        .map(|i| {
            let nonce = (seed as u128) << 8 | i;
            format!("outbox_admin_session=9223372036854775807.{nonce:032x}.operator.YWRtaW4.x")
        })
        .collect();
    format!(
        "POST /admin/outbox/logout HTTP/1.1\r\nHost: {host}\r\nCookie: {}",
        cookies.join("; ")
    )
}

/// `count` forged logouts over [`CONNECTIONS`] connections, each from the
/// address `from(i)` gives its `i`-th request; the time it took and how many
/// answers were `429`.
async fn flood(
    silo: SocketAddr,
    count: usize,
    per_address: usize,
    from: impl Fn(usize) -> IpAddr + Send + Sync + 'static,
) -> (Duration, usize) {
    let next = Arc::new(AtomicUsize::new(0));
    let throttled = Arc::new(AtomicUsize::new(0));
    let from = Arc::new(from);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONNECTIONS {
        let (next, throttled, from) = (next.clone(), throttled.clone(), from.clone());
        tasks.push(tokio::spawn(async move {
            // A connection per address: the server sees each as it is.
            let mut open: Option<(IpAddr, Connection)> = None;
            loop {
                let batch = next.fetch_add(per_address, Ordering::Relaxed);
                if batch >= count {
                    break;
                }
                let address = from(batch / per_address);
                let connection = match &mut open {
                    Some((at, connection)) if *at == address => connection,
                    _ => {
                        &mut open
                            .insert((address, Connection::open(silo, address).await))
                            .1
                    }
                };
                for i in batch..(batch + per_address).min(count) {
                    match connection.send(&forged_logout(silo, i)).await {
                        429 => {
                            throttled.fetch_add(1, Ordering::Relaxed);
                        }
                        303 => {}
                        other => panic!("a forged logout answered {other}"),
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    (started.elapsed(), throttled.load(Ordering::Relaxed))
}

/// `n` sequential admin reads from `from`: their latencies, sorted.
async fn reads(silo: SocketAddr, from: IpAddr, n: usize) -> Vec<Duration> {
    let mut connection = Connection::open(silo, from).await;
    let head = format!(
        "GET /admin/outbox/health HTTP/1.1\r\nHost: {silo}\r\nAuthorization: Bearer {TOKEN}"
    );
    for _ in 0..5 {
        assert_eq!(connection.send(&head).await, 200);
    }
    let mut latencies = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        assert_eq!(connection.send(&head).await, 200);
        latencies.push(started.elapsed());
    }
    latencies.sort();
    latencies
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn ms(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1e3)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let count = env_usize("OUTBOX_BENCH_FLOOD", 20_000);
    let n_reads = env_usize("OUTBOX_BENCH_READS", 300);
    let silo = Silo::start();
    let reader = IpAddr::V4(Ipv4Addr::new(127, 3, 0, 1));
    let before = reads(silo.us, reader, n_reads).await;
    let rss_before = silo.rss_kib();

    let per_address = count.div_ceil(ADDRESSES).max(1);
    let (spread, spread_throttled) = flood(silo.us, count, per_address, |n| {
        IpAddr::V4(Ipv4Addr::new(127, 2, (n / 250) as u8, (n % 250 + 1) as u8))
    })
    .await;
    let rss_spread = silo.rss_kib();
    let (single, single_throttled) = flood(silo.us, count, 100, |_| {
        IpAddr::V4(Ipv4Addr::new(127, 4, 0, 1))
    })
    .await;
    let rss_after = silo.rss_kib();
    let after = reads(silo.us, IpAddr::V4(Ipv4Addr::new(127, 3, 0, 2)), n_reads).await;

    let rate = |elapsed: Duration| format!("{:.0}/s", count as f64 / elapsed.as_secs_f64());
    let grew = |kib: u64| format!("{:+.1} MiB", (kib as f64 - rss_before as f64) / 1024.0);
    println!("### Forged logouts (`cargo bench -p example-app --bench forged_logout`)");
    println!();
    println!(
        "{count} forged `POST /logout`, 20 cookies each, {CONNECTIONS} connections; \
         {n_reads} admin reads (`GET /health`) before and after."
    );
    println!();
    println!("| phase | time | rate | answered 429 | silo memory since baseline |");
    println!("|---|---|---|---|---|");
    println!("| baseline | | | | {} MiB |", rss_before / 1024);
    println!(
        "| flood from {ADDRESSES} addresses | {:.1} s | {} | {spread_throttled} | {} |",
        spread.as_secs_f64(),
        rate(spread),
        grew(rss_spread)
    );
    println!(
        "| flood from one address | {:.1} s | {} | {single_throttled} | {} |",
        single.as_secs_f64(),
        rate(single),
        grew(rss_after)
    );
    println!();
    println!("| admin read | before | after | after ÷ before |");
    println!("|---|---|---|---|");
    for (name, q) in [("median", 0.5), ("p99", 0.99)] {
        let (b, a) = (quantile(&before, q), quantile(&after, q));
        println!(
            "| {name} | {} | {} | {:.2}× |",
            ms(b),
            ms(a),
            a.as_secs_f64() / b.as_secs_f64()
        );
    }
}
