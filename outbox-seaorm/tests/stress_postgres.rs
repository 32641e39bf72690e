//! Stress on PostgreSQL: 4 concurrent drains (each its own pool: another
//! process), 1,000 shards in 1,024 buckets, 10,000 messages, receivers failing
//! 10% of the time. Seeded: the messages and which deliveries fail come from
//! `OUTBOX_STRESS_SEED` (printed; set it to replay a run's choices).

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{database, OutboxCategory, Recorder};
use outbox_core::drain::DEFAULT_LEASE;
use outbox_core::store::StoreAdmin;
use outbox_core::{BackoffPolicy, DrainConfig, Drainer, OutboxKind, ShardKey};
use outbox_seaorm::{write_region_many, ObjectId, OutboxMessage, SeaOrmStore, ShardId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sea_orm::DbBackend;
use serde_json::json;

/// Leases without a single delivery, rows pending, after which the drains
/// count as stalled: a claim left behind ends with its lease, and retries
/// here back off for 20 ms at most, so a working drain delivers something
/// in every lease.
const STALL_LEASES: u32 = 10;

/// Whether the `attempt`th delivery of row `id` fails: a function of the
/// seed, so that a replay fails the same deliveries whatever the order the
/// drains reach them in.
fn fails(seed: u64, id: i64, attempt: u64) -> bool {
    let mixed = seed ^ (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ attempt.rotate_left(32);
    StdRng::seed_from_u64(mixed).random_bool(0.10)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_drains_over_a_thousand_shards_lose_nothing_and_keep_order() {
    let seed = outbox_testing::seed("OUTBOX_STRESS_SEED");
    let t = database(DbBackend::Postgres, "stress").await;
    let mut rng = StdRng::seed_from_u64(seed);
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
    let attempts: Mutex<HashMap<i64, u64>> = Mutex::default();
    recorder.fail_when(move |message| {
        let attempt = {
            let mut attempts = attempts.lock().unwrap();
            let attempt = attempts.entry(message.id).or_default();
            *attempt += 1;
            *attempt
        };
        fails(seed, message.id, attempt)
    });
    let config = DrainConfig::default()
        .batch_size(200)
        .concurrency(8)
        .backoff(BackoffPolicy::new(
            Duration::from_millis(1),
            Duration::from_millis(20),
        ));
    let stall_bound = DEFAULT_LEASE * STALL_LEASES;
    // When a drain last delivered something.
    let last_delivery = Arc::new(Mutex::new(Instant::now()));
    let mut workers = Vec::new();
    for worker in 0..4 {
        let db = t.connect_again(6).await.unwrap();
        let drainer = Drainer::builder(SeaOrmStore::new(db).unwrap(), recorder.receivers())
            .config(config)
            .owner(format!("stress-{worker}"))
            .build();
        let last_delivery = last_delivery.clone();
        workers.push(tokio::spawn(async move {
            loop {
                let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
                if report.deliveries > 0 {
                    *last_delivery.lock().unwrap() = Instant::now();
                    continue;
                }
                let pending = drainer
                    .view()
                    .pending_count(OutboxKind::Region)
                    .await
                    .unwrap();
                if pending == 0 {
                    break;
                }
                let idle = last_delivery.lock().unwrap().elapsed();
                assert!(
                    idle < stall_bound,
                    "OUTBOX_STRESS_SEED={seed}: {pending} rows pending and no delivery for \
                     {idle:.1?} (bound {stall_bound:?}, {STALL_LEASES} leases): the drains stalled"
                );
                if report.is_empty() {
                    // What is left backs off (up to 20 ms): nothing to await.
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
        "OUTBOX_STRESS_SEED={seed}: everything drained"
    );
    assert_eq!(
        recorder.overlaps(),
        0,
        "OUTBOX_STRESS_SEED={seed}: a shard was delivered by two workers at once"
    );
    let deliveries = recorder.deliveries();
    // Nothing lost: each group's newest row was delivered.
    for ((shard, category, object), id) in &newest {
        assert!(
            deliveries.iter().any(|d| &d.shard == shard
                && d.category.to_string() == *category
                && d.object == *object
                && d.id == *id),
            "OUTBOX_STRESS_SEED={seed}: newest row {id} of {shard} {category}/{object} never delivered"
        );
    }
    // Order per shard: successful deliveries come in increasing lowest id.
    let mut last: HashMap<ShardKey, i64> = HashMap::new();
    for d in &deliveries {
        if let Some(previous) = last.insert(d.shard.clone(), d.first_id) {
            assert!(
                previous < d.first_id,
                "OUTBOX_STRESS_SEED={seed}: {} went back from {previous} to {}",
                d.shard,
                d.first_id
            );
        }
    }
}
