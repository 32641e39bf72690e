//! Stress on PostgreSQL: 4 concurrent drains, 1,000 shards, 10,000 messages,
//! receivers failing 10% of the time.

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{database, OutboxCategory, Recorder};
use outbox_core::{BackoffPolicy, DrainConfig, Drainer, OutboxKind, ShardKey, Store};
use outbox_seaorm::{write_region_many, OutboxMessage, SeaOrmStore};
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
        messages.push(OutboxMessage::new(category, shard, object).with_payload(json!({ "n": n })));
    }
    let written = write_region_many(&t.db, messages.clone()).await.unwrap();
    let mut newest: HashMap<(ShardKey, &'static str, i64), i64> = HashMap::new();
    for (row, message) in written.iter().zip(&messages) {
        let entry = newest
            .entry((row.shard.clone(), row.category, message.object_identifier))
            .or_default();
        *entry = (*entry).max(row.id);
    }

    let recorder = Recorder::new();
    recorder.yield_inside(true);
    recorder.fail_when(|_| rand::rng().random_bool(0.10));
    let config = DrainConfig::default()
        .shards_per_claim(64)
        .batch_size(4)
        .concurrency(8)
        .backoff(BackoffPolicy::new(
            Duration::from_millis(1),
            Duration::from_millis(20),
        ));
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..4 {
        let db = t.connect_again(6).await.unwrap();
        let drainer = Drainer::new(SeaOrmStore::new(db).unwrap(), recorder.receivers())
            .with_config(config)
            .with_owner(format!("stress-{worker}"));
        workers.push(tokio::spawn(async move {
            while started.elapsed() < Duration::from_secs(240) {
                let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
                if report.is_empty() {
                    if drainer
                        .store()
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

/// A fence (a worker renewing its claims at commit) and a claim by another
/// worker (which locks every row it conflicts with, even one it then leaves
/// alone) lock the same claim rows. They must lock them in the same order, or
/// they deadlock: here the fence's rows are stored out of key order, and a
/// third session holds the first row each would lock, then lets both go at
/// once. Which of them gets going first is up to the scheduler, and only
/// some orders can deadlock, so the race is run a few times.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fence_and_a_claim_racing_for_the_same_rows_cannot_deadlock() {
    for round in 0..4 {
        let label = format!("fence_order_{round}");
        race_a_commit_against_a_claim(outbox_core::ShardEnd::Continue, &label).await;
    }
}

/// The same race against the one-statement commit of a finished round,
/// which deletes its claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_finished_round_and_a_claim_racing_for_the_same_rows_cannot_deadlock() {
    for round in 0..4 {
        let label = format!("release_order_{round}");
        race_a_commit_against_a_claim(outbox_core::ShardEnd::Release, &label).await;
    }
}

async fn race_a_commit_against_a_claim(end: outbox_core::ShardEnd, label: &str) {
    use chrono::{Duration as Span, Utc};
    use outbox_core::{ClaimRequest, CommitBatch, ShardCommit};
    use sea_orm::{ConnectionTrait, TransactionTrait};

    let t = database(DbBackend::Postgres, label).await;
    let messages: Vec<_> = (1..=40i64)
        .map(|org| OutboxMessage::new(OutboxCategory::OrganizationUpdate, org, org))
        .collect();
    write_region_many(&t.db, messages).await.unwrap();
    let now = Utc::now();
    let (a, b) = (
        SeaOrmStore::new(t.connect_again(2).await.unwrap()).unwrap(),
        SeaOrmStore::new(t.connect_again(2).await.unwrap()).unwrap(),
    );
    let claims = a
        .claim_due(&ClaimRequest {
            kind: OutboxKind::Region,
            now,
            lease_until: now + Span::seconds(30),
            token: 1,
            owner: "a".into(),
            limit: 40,
            up_to_id: None,
        })
        .await
        .unwrap();
    assert_eq!(claims.len(), 40);
    // Shards 1–20 get new row versions (not HOT: the indexed token changes
    // and changes back), so scans meet 21–40 first.
    for sql in [
        "UPDATE outbox_shard_claim SET token = -1 WHERE token = 1 AND shard_identifier <= 20",
        "UPDATE outbox_shard_claim SET token = 1 WHERE token = -1",
    ] {
        t.db.execute_unprepared(sql).await.unwrap();
    }
    let blocker = t.db.begin().await.unwrap();
    blocker
        .execute_unprepared(
            "SELECT 1 FROM outbox_shard_claim WHERE shard_identifier IN (1, 21) FOR UPDATE",
        )
        .await
        .unwrap();

    // A commits a round over all 40 claims (renewing or ending them) ...
    let fence = tokio::spawn(async move {
        a.commit(&CommitBatch {
            kind: OutboxKind::Region,
            token: 1,
            now,
            renew_until: now + Span::seconds(30),
            delete_chunk: 1000,
            shards: claims
                .into_iter()
                .map(|claim| ShardCommit {
                    shard: claim.shard,
                    delete_ids: Vec::new(),
                    dead_letters: Vec::new(),
                    end: end.clone(),
                })
                .collect(),
        })
        .await
    });
    // ... while B, whose clock says those leases ran out, claims them.
    let later = now + Span::seconds(60);
    let claim = tokio::spawn(async move {
        b.claim_due(&ClaimRequest {
            kind: OutboxKind::Region,
            now: later,
            lease_until: later + Span::seconds(30),
            token: 2,
            owner: "b".into(),
            limit: 40,
            up_to_id: None,
        })
        .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await; // both wait on the blocker
    blocker.commit().await.unwrap();
    let (fenced, claimed) = (fence.await.unwrap(), claim.await.unwrap());
    let (fenced, claimed) = (fenced.unwrap(), claimed.unwrap());
    // B's clock is past every lease A could hold, so B ends up with all 40;
    // A either went first (and kept all of them until then) or found them
    // all taken: whoever locks shard 1 first goes first on every row.
    assert_eq!(claimed.len(), 40);
    assert!(matches!(fenced.lost.len(), 0 | 40), "{fenced:?}");
}
