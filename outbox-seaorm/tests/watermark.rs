//! The PostgreSQL store's scan watermark (`store::postgres::watermark`):
//! background claims scan the due index from it, so they do not step over
//! the index entries of rows delivered long ago, which vacuum cannot remove
//! while a long transaction holds its horizon back. What must hold: the
//! watermark only limits which shards a claim finds. A row made due again
//! below it (a replayed dead letter keeps its id) is delivered before the
//! newer rows of its shard, and found alone by the next claim that scans
//! from the very start.

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use chrono::{DateTime, Duration, Utc};
use common::{database, OutboxCategory, OutboxScope};
use outbox_core::store::{ClaimOrder, ClaimRequest, DrainStore, StoreAdmin};
use outbox_core::{OutboxKind, ShardKey};
use outbox_seaorm::store::{PgStore, SeaOrmStore};
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend};

fn request(now: DateTime<Utc>, token: i64) -> ClaimRequest {
    ClaimRequest {
        kind: OutboxKind::Region,
        now,
        // The leases end at once: the next claim finds every bucket free.
        lease_until: now,
        token,
        owner: format!("test-{token}"),
        rows: 100,
        up_to_id: None,
        order: ClaimOrder::Oldest,
        beyond: 0,
        shard_rows: usize::MAX,
        held_rows: 0,
    }
}

fn org(id: i64) -> ShardKey {
    ShardKey::region(OutboxScope::OrganizationScope, id)
}

async fn write(db: &DatabaseConnection, shard: &ShardKey) -> i64 {
    write_region(
        db,
        OutboxMessage::new(
            OutboxCategory::OrganizationUpdate,
            ShardId(shard.identifier()),
            ObjectId(1),
        ),
    )
    .await
    .unwrap()
    .id
}

/// Delivered, as far as the scan is concerned: the rows are deleted.
async fn delete(db: &DatabaseConnection, ids: &[i64]) {
    let list: Vec<String> = ids.iter().map(i64::to_string).collect();
    db.execute_unprepared(&format!(
        "DELETE FROM region_outbox WHERE id IN ({})",
        list.join(", ")
    ))
    .await
    .unwrap();
}

/// The claim's shards, each with its row ids in the order returned.
async fn claim(store: &PgStore, now: DateTime<Utc>, token: i64) -> Vec<(i64, Vec<i64>)> {
    store
        .claim_due(&request(now, token))
        .await
        .unwrap()
        .shards
        .into_iter()
        .map(|shard| {
            (
                shard.shard.identifier(),
                shard.rows.iter().map(|row| row.id).collect(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_row_made_due_below_the_watermark_is_delivered_in_order_and_found_alone() {
    let t = database(DbBackend::Postgres, "scan_watermark").await;
    let SeaOrmStore::Postgres(store) = t.store() else {
        panic!("a PostgreSQL store");
    };
    // As under a held-back horizon: claims scan from the watermark whatever
    // a scan from the start costs.
    let store = store.scan_from_watermark_after(std::time::Duration::ZERO);
    let (a, c) = (org(1), org(3));
    // Rows of shards 1 and 3, set aside as dead letters: below everything
    // written after them.
    let a1 = write(&t.db, &a).await;
    let c1 = write(&t.db, &c).await;
    let now = Utc::now();
    assert_eq!(
        store.set_aside(&a, &[a1], "test", now).await.unwrap(),
        Some(1)
    );
    assert_eq!(
        store.set_aside(&c, &[c1], "test", now).await.unwrap(),
        Some(1)
    );

    // Rows of shard 2 written and delivered, claim after claim: the
    // watermark rises above them.
    let mut at = now;
    for token in 1..=4 {
        let b = write(&t.db, &org(2)).await;
        let claimed = claim(&store, at, token).await;
        assert_eq!(claimed, vec![(2, vec![b])]);
        delete(&t.db, &[b]).await;
        at += Duration::milliseconds(300);
    }
    let low = store.scan_watermark(OutboxKind::Region).unwrap();
    assert!(low > c1, "the watermark {low} rose above {c1}");

    // Replayed, both are due again below the watermark; shard 1 gets a
    // newer row.
    assert_eq!(
        store
            .replay_dead_letters(OutboxKind::Region, &[a1, c1])
            .await
            .unwrap(),
        2
    );
    let a2 = write(&t.db, &a).await;

    // The next claim scans from the watermark (the last claim from the
    // very start was less than a second ago): it finds shard 1 by its new
    // row and reads it from its oldest pending row, as many rows as it saw
    // in its window: the replayed one, not the new one; it does not find
    // shard 3.
    let claimed = claim(&store, at, 10).await;
    assert_eq!(claimed, vec![(1, vec![a1])]);
    delete(&t.db, &[a1]).await;
    assert_eq!(claim(&store, at, 11).await, vec![(1, vec![a2])]);
    delete(&t.db, &[a2]).await;
    assert_eq!(claim(&store, at, 12).await, Vec::new());

    // The claim from the very start, a second later, finds it alone.
    let claimed = claim(&store, at + Duration::seconds(1), 13).await;
    assert_eq!(claimed, vec![(3, vec![c1])]);
}
