//! The JetStream sink under crashes, on PostgreSQL and SQLite: worker
//! processes publishing through `JetStreamSink::batch_receiver` are killed with SIGKILL
//! several times while messages are written, and `nats-server` is killed
//! and started again in the middle; a last worker drains the outbox. The
//! stream then holds every message once, each shard in order.
//!
//! Kills and outages fire on what the workers report on their standard
//! output (publishes acknowledged or failed, a reconnection), never after a
//! sleep; how many publishes a worker makes before it is killed comes from
//! `OUTBOX_CRASH_SEED` (printed; set it to replay a run's kill points).

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use outbox_axum::OutboxWorker;
use outbox_core::sink::jetstream::{async_nats, JetStreamSink, MESSAGE_ID_HEADER};
use outbox_core::store::StoreAdmin;
use outbox_core::{BackoffPolicy, BatchItem, DrainConfig, OutboxKind, Receivers};
use outbox_seaorm::{begin_write, write_region, ObjectId, OutboxMessage, ShardId};
use outbox_testing::database::{connect, DbBackend, TestDatabase};
use outbox_testing::nats::{read_stream, NatsServer};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sea_orm::DatabaseConnection;
use serde_json::json;
use tokio::sync::mpsc;

outbox_core::registry! {
    ShopScope = 0 (shard_field = "shop_id") {
        /// A webhook per change: every message is delivered, in order.
        Webhook = 3 (no_coalesce),
    }
}

const CHILD_DB: &str = "OUTBOX_JETSTREAM_CHILD_DB";
const CHILD_NATS: &str = "OUTBOX_JETSTREAM_CHILD_NATS";
const CHILD_FINAL: &str = "OUTBOX_JETSTREAM_CHILD_FINAL";
/// What a worker prints after each batch: its acknowledged and failed
/// publishes.
const BATCH: &str = "outbox-jetstream-child: batch";
/// What a worker prints when its client (re)connects to the server.
const CONNECTED: &str = "outbox-jetstream-child: connected";
/// Workers killed, each while a chunk of the messages is written.
const ROUNDS: i64 = 5;
/// Messages written during each killed worker's life: every one a publish
/// (no coalescing), so a worker reaches any kill point up to half of it.
const CHUNK: i64 = 128;
const MESSAGES: i64 = ROUNDS * CHUNK;
const SHARDS: i64 = 20;
/// The most acknowledged publishes a worker makes before it is killed.
const KILL_AFTER_AT_MOST: usize = CHUNK as usize / 2;
const STREAM: &str = "OUTBOX";
/// The workers' lease.
const LEASE: Duration = Duration::from_secs(2);
/// Leases a worker may go without reporting a batch, rows pending, before
/// the test calls it stalled: a killed worker's claims end with their
/// lease, a publish fails after its 1 s acknowledgement timeout, a retry
/// comes within 0.5 s, and a starting worker takes far less than that.
const STALL_LEASES: u32 = 30;
/// Leases the last worker may take to drain what is left.
const FINAL_DRAIN_LEASES: u32 = 60;

/// The worker process the parent test starts and kills: it publishes
/// `Webhook` through the sink. It does nothing when run on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of killed_workers_and_a_restarted_nats_server_lose_nothing"]
async fn jetstream_worker_child() {
    let (Ok(url), Ok(nats)) = (std::env::var(CHILD_DB), std::env::var(CHILD_NATS)) else {
        return;
    };
    let db = connect(&url, 6).await.unwrap();
    let client = async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .event_callback(|event| async move {
            if matches!(event, async_nats::Event::Connected) {
                println!("{CONNECTED}");
            }
        })
        .connect(nats)
        .await
        .unwrap();
    // Acknowledgements time out after 1 s (5 s by default): a publish caught
    // by the server's restart fails fast and is retried.
    let jetstream = async_nats::jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(1))
        .build(client);
    let sink = JetStreamSink::new(jetstream).with_ack_timeout(Duration::from_secs(1));
    let publish = sink.batch_receiver::<OutboxCategory>();
    // The sink's batch receiver, saying what each batch got: the parent's
    // kill points.
    let receivers = Receivers::new().on_batch(
        OutboxCategory::Webhook,
        move |batch: Vec<BatchItem<OutboxCategory>>| {
            let published = publish(batch);
            async move {
                let results = published.await;
                let failed = results.iter().filter(|result| result.is_err()).count();
                println!("{BATCH} {} {failed}", results.len() - failed);
                results
            }
        },
    );
    let worker = OutboxWorker::builder(db.clone(), receivers)
        .drain_config(
            DrainConfig::default()
                .lease(LEASE)
                .batch_size(4)
                // Shards that failed while the server was down come back
                // within half a second, not after a backoff of seconds.
                .backoff(BackoffPolicy::new(
                    Duration::from_millis(50),
                    Duration::from_millis(500),
                )),
        )
        .poll_interval(Duration::from_millis(20))
        .spawn()
        .await
        .unwrap();
    if std::env::var(CHILD_FINAL).is_ok() {
        // Nothing to await across processes: the count is polled.
        let store = worker.drainer().view();
        let bound = LEASE * FINAL_DRAIN_LEASES;
        let started = Instant::now();
        loop {
            let pending = store.pending_count(OutboxKind::Region).await.unwrap();
            if pending == 0 {
                break;
            }
            let waited = started.elapsed();
            assert!(
                waited < bound,
                "the last worker left {pending} rows after {waited:.1?} (bound {bound:?}, \
                 {FINAL_DRAIN_LEASES} leases)"
            );
            tokio::time::sleep(Duration::from_millis(50)).await; // poll interval
        }
        worker.shutdown().await;
    } else {
        std::future::pending::<()>().await; // until SIGKILL
    }
}

/// What a worker reported.
#[derive(Clone, Copy, Debug)]
enum Report {
    /// A batch: its acknowledged and its failed publishes.
    Batch { published: usize, failed: usize },
    /// Its client (re)connected.
    Connected,
}

/// A worker process and what it reports.
struct Child {
    process: std::process::Child,
    reports: mpsc::UnboundedReceiver<Report>,
    /// Its acknowledged publishes so far.
    published: usize,
    seed: u64,
}

impl Child {
    fn spawn(url: &str, nats: &str, last: bool, seed: u64) -> Self {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args([
                "--exact",
                "jetstream_worker_child",
                "--ignored",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_DB, url)
            .env(CHILD_NATS, nats)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if last {
            command.env(CHILD_FINAL, "1");
        }
        let mut process = command.spawn().unwrap();
        let stdout = process.stdout.take().unwrap();
        let (sender, reports) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let report = if line == CONNECTED {
                    Report::Connected
                } else if let Some(counts) = line.strip_prefix(BATCH) {
                    let mut counts = counts.split_whitespace().map(|n| n.parse().unwrap());
                    Report::Batch {
                        published: counts.next().unwrap(),
                        failed: counts.next().unwrap(),
                    }
                } else {
                    continue;
                };
                if sender.send(report).is_err() {
                    break;
                }
            }
        });
        Self {
            process,
            reports,
            published: 0,
            seed,
        }
    }

    /// The worker's next report that `wanted` accepts.
    async fn next(&mut self, what: &str, wanted: impl Fn(Report) -> bool) {
        let bound = LEASE * STALL_LEASES;
        let started = Instant::now();
        loop {
            let left = bound.saturating_sub(started.elapsed());
            let report = match tokio::time::timeout(left, self.reports.recv()).await {
                Ok(Some(report)) => report,
                Ok(None) => panic!(
                    "OUTBOX_CRASH_SEED={}: the worker exited, waiting for {what} ({} \
                     publishes): {:?}",
                    self.seed,
                    self.published,
                    self.process.wait()
                ),
                Err(_) => panic!(
                    "OUTBOX_CRASH_SEED={}: no {what} from the worker in {:.1?} (bound \
                     {bound:?}, {STALL_LEASES} leases; {} publishes so far)",
                    self.seed,
                    started.elapsed(),
                    self.published
                ),
            };
            if let Report::Batch { published, .. } = report {
                self.published += published;
            }
            if wanted(report) {
                return;
            }
        }
    }

    /// Waits until the worker has had `count` publishes acknowledged.
    async fn published(&mut self, count: usize) {
        while self.published < count {
            self.next(
                "acknowledged publish",
                |report| matches!(report, Report::Batch { published, .. } if published > 0),
            )
            .await;
        }
    }

    /// Waits until a publish of the worker fails (the server is down).
    async fn failed(&mut self) {
        self.next(
            "failed publish",
            |report| matches!(report, Report::Batch { failed, .. } if failed > 0),
        )
        .await;
    }

    /// Waits until the worker's client has reconnected and a publish of
    /// the worker was acknowledged since.
    async fn reconnected(&mut self) {
        self.next("reconnection", |report| matches!(report, Report::Connected))
            .await;
        self.next(
            "acknowledged publish after the reconnection",
            |report| matches!(report, Report::Batch { published, .. } if published > 0),
        )
        .await;
    }

    /// SIGKILL.
    fn kill(mut self) {
        self.process.kill().unwrap();
        self.process.wait().unwrap();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// Writes messages `numbers`, one transaction each (ids commit in order),
/// each payload carrying its shard's sequence number. Returns their message
/// ids.
async fn write(db: DatabaseConnection, numbers: std::ops::Range<i64>) -> Vec<String> {
    let mut written = Vec::new();
    for n in numbers {
        let (shard, sequence) = (n % SHARDS, n / SHARDS);
        let txn = begin_write(&db).await.unwrap();
        let row = write_region(
            &txn,
            OutboxMessage::new(OutboxCategory::Webhook, ShardId(shard), ObjectId(n))
                .with_payload(json!({ "shard": shard, "sequence": sequence })),
        )
        .await
        .unwrap();
        txn.commit().await.unwrap();
        written.push(row.message_id.to_string());
    }
    written
}

/// Waits until a shard of the outbox backs off: what the failed publishes
/// of a worker leave once its round has committed (nothing to await across
/// processes: polled). A worker that took a failed publish for delivered
/// would delete its row instead, and the kill that follows would lose it.
async fn backs_off(db: &TestDatabase, seed: u64) {
    let bound = LEASE * STALL_LEASES;
    let started = Instant::now();
    let store = db.store();
    while store
        .failing_shards(OutboxKind::Region, 1)
        .await
        .unwrap()
        .is_empty()
    {
        assert!(
            started.elapsed() < bound,
            "OUTBOX_CRASH_SEED={seed}: publishes failed, yet no shard backs off after {:.1?} \
             (bound {bound:?}, {STALL_LEASES} leases): a failed publish taken for delivered?",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await; // poll interval
    }
}

async fn killed_workers_and_a_restarted_nats_server_lose_nothing(backend: DbBackend) {
    let seed = outbox_testing::seed("OUTBOX_CRASH_SEED");
    let mut rng = StdRng::seed_from_u64(seed);
    let db = TestDatabase::of(backend, "jetstream_crash").await.unwrap();
    let mut nats = NatsServer::start().unwrap();
    let jetstream = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let sink = JetStreamSink::new(jetstream.clone());
    jetstream
        .create_stream(sink.stream_config(STREAM))
        .await
        .unwrap();

    // Workers killed after a number of acknowledged publishes, each while
    // its chunk is written (or once it is). The server is killed twice
    // (and started again on the same port with the same store): once with
    // the worker killed during the outage, once publishes of it failed and
    // their shards back off (what it took for delivered without an
    // acknowledgement would be lost), once with the worker living on
    // through the restart, killed once it has published again.
    let mut written = Vec::new();
    let mut kill_points = Vec::new();
    for round in 0..ROUNDS {
        let mut child = Child::spawn(&db.url, &nats.url(), false, seed);
        let (first, middle) = (round * CHUNK, round * CHUNK + CHUNK / 2);
        let kill_after = rng.random_range(1..=KILL_AFTER_AT_MOST);
        kill_points.push(kill_after);
        match round {
            1 | 3 => {
                let writer = tokio::spawn(write(db.db.clone(), first..middle));
                child.published(kill_after).await;
                written.extend(writer.await.unwrap());
                nats.kill();
                // The rest of the chunk, which the worker cannot publish now.
                written.extend(write(db.db.clone(), middle..first + CHUNK).await);
                child.failed().await;
                backs_off(&db, seed).await;
                if round == 1 {
                    child.kill(); // SIGKILL, the server down
                    nats.start_again().unwrap();
                } else {
                    nats.start_again().unwrap();
                    child.reconnected().await;
                    child.kill();
                }
            }
            _ => {
                let writer = tokio::spawn(write(db.db.clone(), first..first + CHUNK));
                child.published(kill_after).await;
                child.kill();
                written.extend(writer.await.unwrap());
            }
        }
    }
    let last = Child::spawn(&db.url, &nats.url(), true, seed);
    let status = tokio::task::spawn_blocking(move || {
        let mut last = last;
        last.process.wait().unwrap()
    })
    .await
    .unwrap();
    assert!(
        status.success(),
        "OUTBOX_CRASH_SEED={seed}: the last worker failed (the ones before killed after \
         {kill_points:?} publishes)"
    );
    assert_eq!(
        db.store().pending_count(OutboxKind::Region).await.unwrap(),
        0,
        "the outbox is empty"
    );

    let messages = read_stream(&jetstream, STREAM, Duration::from_secs(10))
        .await
        .unwrap();
    let problems = check_stream(&messages, &written);
    assert!(
        problems.is_empty(),
        "OUTBOX_CRASH_SEED={seed}: {} problems in the stream ({} messages for {MESSAGES} \
         written, workers killed after {kill_points:?} publishes), first ones:\n{}",
        problems.len(),
        messages.len(),
        problems[..problems.len().min(20)].join("\n")
    );
}

/// What is wrong with the stream: a message id twice (a duplicate the
/// stream did not drop), a shard's sequence numbers out of order or twice,
/// a written message missing, a message nobody wrote.
fn check_stream(messages: &[async_nats::Message], written: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut ids = HashSet::new();
    let mut shards: HashMap<i64, Vec<i64>> = HashMap::new();
    for message in messages {
        let id = message
            .headers
            .as_ref()
            .and_then(|headers| headers.get(MESSAGE_ID_HEADER))
            .map(|id| id.to_string())
            .unwrap_or_default();
        if !ids.insert(id.clone()) {
            problems.push(format!("message id {id} is in the stream twice"));
        }
        let body: serde_json::Value = serde_json::from_slice(&message.payload).unwrap();
        let shard = body["shard"].as_i64().unwrap();
        let sequence = body["sequence"].as_i64().unwrap();
        if message.subject.as_str() != format!("outbox.Webhook.region.{shard}") {
            problems.push(format!("shard {shard} on subject {}", message.subject));
        }
        let seen = shards.entry(shard).or_default();
        match seen.last() {
            Some(&previous) if previous == sequence => problems.push(format!(
                "shard {shard}: sequence {sequence} twice in a row (a duplicate)"
            )),
            Some(&previous) if previous > sequence => problems.push(format!(
                "shard {shard}: sequence {sequence} after {previous} (reordered or duplicated)"
            )),
            _ => {}
        }
        seen.push(sequence);
    }
    for shard in 0..SHARDS {
        let seen: HashSet<i64> = shards.get(&shard).into_iter().flatten().copied().collect();
        let missing: Vec<i64> = (0..MESSAGES / SHARDS)
            .filter(|sequence| !seen.contains(sequence))
            .collect();
        if !missing.is_empty() {
            problems.push(format!(
                "shard {shard}: sequences {missing:?} missing (lost)"
            ));
        }
    }
    let written: HashSet<&str> = written.iter().map(String::as_str).collect();
    let unknown = ids
        .iter()
        .filter(|id| !written.contains(id.as_str()))
        .count();
    let lost = written.iter().filter(|id| !ids.contains(**id)).count();
    if unknown > 0 || lost > 0 {
        problems.push(format!(
            "{lost} written message ids are not in the stream, and {unknown} ids in it were never written"
        ));
    }
    problems
}

outbox_testing::on_both_backends!(killed_workers_and_a_restarted_nats_server_lose_nothing);
