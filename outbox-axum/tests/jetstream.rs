//! The JetStream sink under crashes, on PostgreSQL and SQLite: worker
//! processes publishing through `JetStreamSink::batch_receiver` are killed with SIGKILL
//! several times while messages are written, and `nats-server` is killed
//! and started again in the middle; a last worker drains the outbox. The
//! stream then holds every message once, each shard in order.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::{HashMap, HashSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use outbox_axum::OutboxWorker;
use outbox_core::sink::jetstream::{async_nats, JetStreamSink, MESSAGE_ID_HEADER};
use outbox_core::{BackoffPolicy, DrainConfig, OutboxKind, Receivers, StoreAdmin};
use outbox_seaorm::{begin_write, write_region, ObjectId, OutboxMessage, ShardId};
use outbox_testing::database::{connect, DbBackend, TestDatabase};
use outbox_testing::nats::{read_stream, NatsServer};
use serde_json::json;

outbox_core::registry! {
    ShopScope = 0 (shard_field = "shop_id") {
        /// A webhook per change: every message is delivered, in order.
        Webhook = 3 (no_coalesce),
    }
}

const CHILD_DB: &str = "OUTBOX_JETSTREAM_CHILD_DB";
const CHILD_NATS: &str = "OUTBOX_JETSTREAM_CHILD_NATS";
const CHILD_FINAL: &str = "OUTBOX_JETSTREAM_CHILD_FINAL";
const MESSAGES: i64 = 640;
const SHARDS: i64 = 20;
const STREAM: &str = "OUTBOX";
/// How long the last worker may take to drain what is left.
const FINAL_DRAIN: Duration = Duration::from_secs(120);

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
        .connect(nats)
        .await
        .unwrap();
    // Acknowledgements time out after 1 s (5 s by default): a publish caught
    // by the server's restart fails fast and is retried.
    let jetstream = async_nats::jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(1))
        .build(client);
    let sink = JetStreamSink::new(jetstream).with_ack_timeout(Duration::from_secs(1));
    let receivers = Receivers::new().on_batch(OutboxCategory::Webhook, sink.batch_receiver());
    let worker = OutboxWorker::builder(db.clone(), receivers)
        .drain_config(
            DrainConfig::default()
                .lease(Duration::from_secs(2))
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
        let store = worker.drainer().view();
        let started = Instant::now();
        while store.pending_count(OutboxKind::Region).await.unwrap() > 0 {
            assert!(
                started.elapsed() < FINAL_DRAIN,
                "the outbox was not drained within {FINAL_DRAIN:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await; // poll interval
        }
        worker.shutdown().await;
    } else {
        std::future::pending::<()>().await; // until SIGKILL
    }
}

fn spawn_child(url: &str, nats: &str, last: bool) -> std::process::Child {
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
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if last {
        command.env(CHILD_FINAL, "1");
    }
    command.spawn().unwrap()
}

async fn stream_count(jetstream: &async_nats::jetstream::Context) -> u64 {
    let stream = jetstream.get_stream(STREAM).await.unwrap();
    stream.get_info().await.unwrap().state.messages
}

async fn killed_workers_and_a_restarted_nats_server_lose_nothing(backend: DbBackend) {
    let db = TestDatabase::of(backend, "jetstream_crash").await.unwrap();
    let mut nats = NatsServer::start().unwrap();
    let jetstream = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let sink = JetStreamSink::new(jetstream.clone());
    jetstream
        .create_stream(sink.stream_config(STREAM))
        .await
        .unwrap();

    // One writer, one transaction per message: ids commit in order, and each
    // payload carries its shard's sequence number.
    let writer_db = db.db.clone();
    let writer = tokio::spawn(async move {
        let mut written = Vec::new();
        for n in 0..MESSAGES {
            let (shard, sequence) = (n % SHARDS, n / SHARDS);
            let txn = begin_write(&writer_db).await.unwrap();
            let row = write_region(
                &txn,
                OutboxMessage::new(OutboxCategory::Webhook, ShardId(shard), ObjectId(n))
                    .with_payload(json!({ "shard": shard, "sequence": sequence })),
            )
            .await
            .unwrap();
            txn.commit().await.unwrap();
            written.push(row.message_id.to_string());
            if n % 50 == 0 {
                tokio::time::sleep(Duration::from_millis(20)).await; // pace the writes
            }
        }
        written
    });

    // Workers killed at arbitrary points. The server is killed twice (and
    // started again on the same port with the same store): once with the
    // worker killed during the outage (what it took for delivered without
    // an acknowledgement would be lost), once with the worker living on
    // through the restart.
    let mut progress = Vec::new();
    for round in 0..5u64 {
        let before = stream_count(&jetstream).await;
        let mut child = spawn_child(&db.url, &nats.url(), false);
        tokio::time::sleep(Duration::from_millis(300 + 70 * round)).await; // kill point
        match round {
            1 => {
                nats.kill();
                tokio::time::sleep(Duration::from_millis(400)).await; // kill point, server down
                child.kill().unwrap(); // SIGKILL
                nats.start_again().unwrap();
            }
            3 => {
                nats.kill();
                tokio::time::sleep(Duration::from_millis(200)).await; // the outage
                nats.start_again().unwrap();
                tokio::time::sleep(Duration::from_millis(300)).await; // kill point
                child.kill().unwrap();
            }
            _ => child.kill().unwrap(),
        }
        child.wait().unwrap();
        progress.push(stream_count(&jetstream).await - before);
    }
    let written = writer.await.unwrap();
    let mut last = spawn_child(&db.url, &nats.url(), true);
    let status = tokio::task::spawn_blocking(move || last.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "the last worker failed");
    assert!(
        progress.iter().filter(|&&published| published > 0).count() >= 3,
        "killed workers published something before they died: {progress:?}"
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
        "{} problems in the stream ({} messages for {MESSAGES} written), first ones:\n{}",
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
