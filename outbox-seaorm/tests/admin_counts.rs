//! The admin reads' counts above the cap, where the stores differ: on
//! PostgreSQL the planner's statistics give an estimate (`~n`), on SQLite
//! the count says "at least the cap". Below the cap both are exact (the
//! conformance suite's `admin_counts`).

#![allow(missing_docs, clippy::unwrap_used)]

use outbox_core::store::StoreAdmin;
use outbox_core::{Count, OutboxKind};
use outbox_testing::database::TestDatabase;
use sea_orm::ConnectionTrait;

/// `rows` rows over 4 shards of scope 0 and 4 of scope 1, as one statement.
async fn fill(t: &TestDatabase, rows: i64) {
    t.db.execute_unprepared(&format!(
        "INSERT INTO region_outbox (shard_scope, shard_identifier, category, object_identifier, \
         payload, message_id)
         SELECT (n % 8) / 4, n % 8, 1, n, NULL, \
                ('00000000-0000-7000-8000-' || lpad(n::text, 12, '0'))::uuid
         FROM generate_series(1, {rows}) n"
    ))
    .await
    .unwrap();
}

/// Once the table is analyzed, the pending rows above the cap and each
/// scope's share are the planner's estimates; the backlog's oldest row and
/// the deepest shards' depths stay what was counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_estimates_counts_above_the_cap_from_the_statistics() {
    let t = TestDatabase::postgres("estimated_counts").await.unwrap();
    fill(&t, 400).await;
    t.db.execute_unprepared("ANALYZE region_outbox")
        .await
        .unwrap();
    let store = t.store();

    let snapshot = store.snapshot(OutboxKind::Region, 10, 20).await.unwrap();
    assert_eq!(snapshot.pending, Count::Estimated(400));
    assert_eq!(snapshot.pending.to_string(), "~400");
    // 50 rows per shard: each listed shard is counted up to 10 rows, then
    // estimated from pg_stats on shard_identifier.
    assert_eq!(snapshot.deepest[0].depth, Count::Estimated(50));

    let backlog = store.read_backlog(OutboxKind::Region, 20).await.unwrap();
    assert_eq!(backlog.pending, Count::Estimated(400));
    let scopes: Vec<(i32, Count)> = backlog.scopes.iter().map(|s| (s.scope, s.depth)).collect();
    assert_eq!(
        scopes,
        vec![(0, Count::Estimated(200)), (1, Count::Estimated(200))]
    );
    assert!(backlog.oldest_date_added.is_some());

    // The cap above the table: exact again, whatever the statistics say.
    let backlog = store.read_backlog(OutboxKind::Region, 400).await.unwrap();
    assert_eq!(backlog.pending, Count::Exact(400));
    assert_eq!(backlog.scopes[1].depth, Count::Exact(200));
}

/// SQLite keeps no statistics to estimate from: above the cap a count is
/// "at least the cap".
#[tokio::test]
async fn sqlite_says_at_least_the_cap_above_it() {
    let t = TestDatabase::sqlite("capped_counts").await.unwrap();
    for n in 1..=30_i64 {
        t.db.execute_unprepared(&format!(
            "INSERT INTO region_outbox (shard_scope, shard_identifier, category, \
             object_identifier, payload, message_id) VALUES ({}, {}, 1, {n}, NULL, \
             '00000000-0000-7000-8000-{n:012}')",
            (n % 8) / 4,
            n % 8
        ))
        .await
        .unwrap();
    }
    let store = t.store();
    let snapshot = store.snapshot(OutboxKind::Region, 10, 20).await.unwrap();
    assert_eq!(snapshot.pending, Count::AtLeast(20));
    assert_eq!(snapshot.pending.to_string(), "≥ 20");
    let backlog = store.read_backlog(OutboxKind::Region, 20).await.unwrap();
    assert_eq!(backlog.pending, Count::AtLeast(20));
    let exact = store.read_backlog(OutboxKind::Region, 30).await.unwrap();
    assert_eq!(exact.pending, Count::Exact(30));
}
