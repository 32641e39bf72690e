//! Stress on PostgreSQL: 4 concurrent drains (each its own pool: another
//! process), 1,000 shards in 1,024 buckets, 10,000 messages, receivers failing
//! 10% of the time.

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{database, OutboxCategory, Recorder};
use outbox_core::{BackoffPolicy, DrainConfig, Drainer, OutboxKind, ShardKey, StoreAdmin};
use outbox_seaorm::{write_region_many, ObjectId, OutboxMessage, SeaOrmStore, ShardId};
use rand::Rng;
use sea_orm::DbBackend;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_drains_over_a_thousand_shards_lose_nothing_and_keep_order() {
    let t = database(DbBackend::Postgres, "stress").await;
    let mut rng = rand::rng();
    let mut messages = Vec::with_capacity(10_000);
    // (shard, group) -> highest id written, filled after the insert.
    for n in 0..10_000i64 {
        let shard = rng.random_range(0..1_000i64);
        let category = if rng.random_bool(0.5) {
            OutboxCategory::OrganizationUpdate
        } else {
            OutboxCategory::OrganizationMemberUpdate
        };
        let object = rng.random_range(0..5i64);
        messages.push(
            OutboxMessage::new(category, ShardId(shard), ObjectId(object))
                .with_payload(json!({ "n": n })),
        );
    }
    let written = write_region_many(&t.db, messages.clone()).await.unwrap();
    let mut newest: HashMap<(ShardKey, &'static str, i64), i64> = HashMap::new();
    for (row, message) in written.iter().zip(&messages) {
        let entry = newest
            .entry((row.shard.clone(), row.category, message.object_identifier.0))
            .or_default();
        *entry = (*entry).max(row.id);
    }

    let recorder = Recorder::new();
    recorder.yield_inside(true);
    recorder.fail_when(|_| rand::rng().random_bool(0.10));
    let config = DrainConfig::default()
        .batch_size(200)
        .concurrency(8)
        .backoff(BackoffPolicy::new(
            Duration::from_millis(1),
            Duration::from_millis(20),
        ));
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..4 {
        let db = t.connect_again(6).await.unwrap();
        let drainer = Drainer::builder(SeaOrmStore::new(db).unwrap(), recorder.receivers())
            .config(config)
            .owner(format!("stress-{worker}"))
            .build();
        workers.push(tokio::spawn(async move {
            while started.elapsed() < Duration::from_secs(240) {
                let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
                if report.is_empty() {
                    if drainer
                        .view()
                        .pending_count(OutboxKind::Region)
                        .await
                        .unwrap()
                        == 0
                    {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }

    assert_eq!(
        t.store().pending_count(OutboxKind::Region).await.unwrap(),
        0,
        "drained within the time bound"
    );
    assert_eq!(
        recorder.overlaps(),
        0,
        "a shard was delivered by two workers at once"
    );
    let deliveries = recorder.deliveries();
    // Nothing lost: each group's newest row was delivered.
    for ((shard, category, object), id) in &newest {
        assert!(
            deliveries.iter().any(|d| &d.shard == shard
                && d.category.to_string() == *category
                && d.object == *object
                && d.id == *id),
            "newest row {id} of {shard} {category}/{object} never delivered"
        );
    }
    // Order per shard: successful deliveries come in increasing lowest id.
    let mut last: HashMap<ShardKey, i64> = HashMap::new();
    for d in &deliveries {
        if let Some(previous) = last.insert(d.shard.clone(), d.first_id) {
            assert!(
                previous < d.first_id,
                "{} went back from {previous} to {}",
                d.shard,
                d.first_id
            );
        }
    }
}
