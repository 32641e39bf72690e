//! The JetStream sink end to end, on PostgreSQL and SQLite, against a real
//! `nats-server` the test starts: workers in child processes are killed
//! with SIGKILL while they publish, and the server is killed and restarted
//! in the middle; afterwards the stream holds every message exactly once,
//! in order per shard, and the outbox is empty.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::{BTreeMap, HashSet};
use std::process::{Command, Stdio};
use std::time::Duration;

use async_nats::jetstream;
use outbox_axum::OutboxWorker;
use outbox_core::sink::jetstream::JetStreamSink;
use outbox_core::testing::nats::{read_stream, NatsServer};
use outbox_core::{BackoffPolicy, DrainConfig, OutboxKind, Receivers, StoreAdmin};
use outbox_seaorm::testing::{connect, DbBackend, TestDatabase};
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId};
use sea_orm::TransactionTrait;

outbox_core::registry! {
    OrgScope = 0 (shard_field = "organization_id") {
        /// Every one delivered: the stream must hold all of them.
        Webhook = 1 (no_coalesce),
    }
}

const CHILD_DB: &str = "OUTBOX_JETSTREAM_CHILD_DB";
const CHILD_NATS: &str = "OUTBOX_JETSTREAM_CHILD_NATS";
const CHILD_FINAL: &str = "OUTBOX_JETSTREAM_CHILD_FINAL";
const MESSAGES: i64 = 600;
const SHARDS: i64 = 20;

async fn context(url: &str) -> jetstream::Context {
    let client = async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect(url)
        .await
        .unwrap();
    jetstream::ContextBuilder::new()
        .ack_timeout(Duration::from_secs(2))
        .build(client)
}

/// The worker process the parent test starts and kills. Does nothing when
/// run on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of killed_workers_and_a_restarted_server_lose_duplicate_and_reorder_nothing"]
async fn jetstream_child() {
    let (Ok(db_url), Ok(nats_url)) = (std::env::var(CHILD_DB), std::env::var(CHILD_NATS)) else {
        return;
    };
    let db = connect(&db_url, 6).await.unwrap();
    let sink = JetStreamSink::new(context(&nats_url).await, "outbox").unwrap();
    let receivers = Receivers::new().on(OutboxCategory::Webhook, sink.receiver());
    let worker = OutboxWorker::builder(db.clone(), receivers)
        .drain_config(
            DrainConfig::default()
                .lease(Duration::from_secs(2))
                .batch_size(4)
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
        let store = worker.drainer().admin().clone();
        while store.pending_count(OutboxKind::Region).await.unwrap() > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        worker.shutdown().await;
    } else {
        std::future::pending::<()>().await; // until SIGKILL
    }
}

fn spawn_child(db_url: &str, nats_url: &str, last: bool) -> std::process::Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "jetstream_child",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_DB, db_url)
        .env(CHILD_NATS, nats_url)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if last {
        command.env(CHILD_FINAL, "1");
    }
    command.spawn().unwrap()
}

async fn killed_workers_and_a_restarted_server_lose_duplicate_and_reorder_nothing(
    backend: DbBackend,
) {
    let db = TestDatabase::of(backend, "jetstream").await.unwrap();
    let mut server = NatsServer::start().await.unwrap();
    let jetstream = context(&server.url()).await;
    jetstream
        .get_or_create_stream(jetstream::stream::Config {
            name: "OUTBOX".into(),
            subjects: vec!["outbox.>".into()],
            storage: jetstream::stream::StorageType::File,
            duplicate_window: Duration::from_secs(600),
            ..Default::default()
        })
        .await
        .unwrap();

    // One writer, one transaction per message; each shard's messages carry
    // their sequence number within the shard.
    let writer_db = db.db.clone();
    let writer = tokio::spawn(async move {
        let mut written = Vec::new();
        for n in 0..MESSAGES {
            let txn = writer_db.begin().await.unwrap();
            let row = write_region(
                &txn,
                OutboxMessage::new(
                    OutboxCategory::Webhook,
                    ShardId(n % SHARDS),
                    ObjectId(n % 3),
                )
                .with_payload(serde_json::json!({ "seq": n / SHARDS })),
            )
            .await
            .unwrap();
            txn.commit().await.unwrap();
            written.push(row.message_id);
            if n % 50 == 0 {
                tokio::time::sleep(Duration::from_millis(20)).await; // spread the writes over the kills
            }
        }
        written
    });

    for round in 0..4u64 {
        let mut child = spawn_child(&db.url, &server.url(), false);
        tokio::time::sleep(Duration::from_millis(300 + 80 * round)).await; // a kill point, not a wait
        if round == 1 {
            // The server dies under the worker, and comes back.
            server.kill().await.unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            server.restart().await.unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }
    let written = writer.await.unwrap();
    // The killed workers published part of it (so kills fell mid-stream).
    let before = read_stream(&jetstream, "OUTBOX").await.unwrap().len() as i64;
    assert!(before > 0, "the killed workers published nothing");
    let mut last = spawn_child(&db.url, &server.url(), true);
    let status = tokio::task::spawn_blocking(move || last.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "the final worker failed");
    assert_eq!(
        db.store().pending_count(OutboxKind::Region).await.unwrap(),
        0
    );

    let messages = read_stream(&jetstream, "OUTBOX").await.unwrap();
    eprintln!(
        "{backend:?}: {before} of {MESSAGES} published before the final worker, {} after",
        messages.len()
    );
    let ids: Vec<String> = messages
        .iter()
        .map(|m| m.headers.get("Nats-Msg-Id").unwrap().to_string())
        .collect();
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "a message id twice in the stream");
    let expected: HashSet<String> = written.iter().map(ToString::to_string).collect();
    assert_eq!(
        unique.into_iter().cloned().collect::<HashSet<_>>(),
        expected,
        "the stream holds exactly the messages written"
    );
    let mut per_shard: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for message in &messages {
        let payload: serde_json::Value = serde_json::from_slice(&message.payload).unwrap();
        per_shard
            .entry(message.subject.to_string())
            .or_default()
            .push(payload["seq"].as_i64().unwrap());
    }
    assert_eq!(per_shard.len() as i64, SHARDS);
    for (subject, seqs) in per_shard {
        let expected: Vec<i64> = (0..MESSAGES / SHARDS).collect();
        assert_eq!(
            seqs, expected,
            "{subject}: lost, duplicated or out of order"
        );
    }
}

outbox_seaorm::on_both_backends!(
    killed_workers_and_a_restarted_server_lose_duplicate_and_reorder_nothing,
);
