//! The drain through the JetStream sink, as a ratio to the plain drain
//! (a no-op receiver) measured in the same run, on PostgreSQL and a local
//! `nats-server -js` (file storage) that the bench starts.
//!
//! Run with `cargo bench -p outbox-seaorm --bench jetstream`. Uses
//! `DATABASE_URL` when set; otherwise starts a throwaway cluster, like
//! `benches/drain.rs`. Each scenario: 20,000 pre-filled messages, drained
//! once with a no-op receiver and once through the sink (each publish
//! acknowledged before its rows are deleted), median of 3 such pairs.

#![allow(missing_docs, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use async_nats::jetstream;
use outbox_core::sink::jetstream::JetStreamSink;
use outbox_core::testing::nats::NatsServer;
use outbox_core::{DrainConfig, Drainer, OutboxKind, Receivers};
use outbox_seaorm::testing::{start_cluster_at, stop_cluster_at, TestDatabase};
use outbox_seaorm::SeaOrmStore;
use sea_orm::DatabaseConnection;

#[allow(
    dead_code,
    reason = "shared with benches/drain.rs, which uses all of it"
)]
mod support;
use support::{drain_all, fill, median, rate, OutboxCategory};

const MESSAGES: i64 = 20_000;
const REPEATS: usize = 3;

/// The drain of the pre-filled outbox through `sink`: elapsed time.
async fn drain_through(db: &DatabaseConnection, sink: &JetStreamSink) -> Duration {
    let receivers = Receivers::new().on(OutboxCategory::BenchUpdate, sink.receiver());
    let drainer = Drainer::new(SeaOrmStore::new(db.clone()).unwrap(), receivers)
        .with_config(DrainConfig::default());
    let started = Instant::now();
    loop {
        let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
        assert!(
            report.failures.is_empty(),
            "a publish failed: {:?}",
            report.failures
        );
        if report.is_empty() {
            return started.elapsed();
        }
    }
}

#[tokio::main]
async fn main() {
    let own_cluster = std::env::var("DATABASE_URL").is_err();
    let dir = std::env::temp_dir().join(format!("outbox-bench-pg-{}", std::process::id()));
    let admin = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => start_cluster_at(&dir, true).unwrap(),
    };
    let database = TestDatabase::postgres_on(&admin, "bench_jetstream")
        .await
        .unwrap();
    let db = &database.db;
    let server = NatsServer::start().await.unwrap();
    let client = async_nats::connect(server.url()).await.unwrap();
    let context = jetstream::new(client);
    let mut stream = context
        .get_or_create_stream(jetstream::stream::Config {
            name: "OUTBOX".into(),
            subjects: vec!["outbox.>".into()],
            storage: jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .unwrap();
    let sink = JetStreamSink::new(context.clone(), "outbox").unwrap();

    println!(
        "PostgreSQL drain of {MESSAGES} pre-filled messages, one process: a no-op receiver (plain) \
         vs the JetStream sink (file storage, each publish acknowledged); medians of {REPEATS} pairs"
    );
    println!(
        "  {:<36} {:>9} {:>9} {:>7}",
        "scenario", "plain/s", "sink/s", "ratio"
    );
    for (label, shards) in [
        ("(a) 20,000 shards x 1 message", MESSAGES),
        ("(b) 100 shards x 200 messages", 100),
    ] {
        let (mut plain, mut through, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..REPEATS {
            fill(db, MESSAGES, shards, None).await;
            let (elapsed, _, _) = drain_all(db, DrainConfig::default(), 1).await;
            let plain_rate = rate(MESSAGES, elapsed);
            fill(db, MESSAGES, shards, None).await;
            stream.purge().await.unwrap();
            let sink_rate = rate(MESSAGES, drain_through(db, &sink).await);
            let stored = stream.info().await.unwrap().state.messages;
            assert_eq!(stored, MESSAGES as u64, "every message stored once");
            plain.push(plain_rate);
            through.push(sink_rate);
            ratios.push(sink_rate / plain_rate);
        }
        println!(
            "  {:<36} {:>9.0} {:>9.0} {:>6.2}x",
            label,
            median(&mut plain),
            median(&mut through),
            median(&mut ratios)
        );
    }
    drop(server);
    db.clone().close().await.unwrap();
    drop(database);
    if own_cluster {
        stop_cluster_at(&dir).unwrap();
    }
}
