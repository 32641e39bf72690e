//! The partition ring (PostgreSQL, `outbox_seaorm::ring`, opted into with
//! `outbox_migrations::OutboxRingMigrator`): each outbox table is
//! partitioned by id into a ring of three, and drained partitions
//! are emptied with `TRUNCATE` instead of waiting for vacuum. What must
//! hold: a shard's rows are delivered in id order across partition
//! boundaries and across the ring's wrap; a partition is emptied only when
//! the sequence has moved past it and no row in it is pending or being
//! written; and emptying it frees its space while a transaction holds the
//! xmin horizon back.

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{database, drain_everything, OutboxCategory, Recorder};
use outbox_core::store::StoreAdmin;
use outbox_core::{DrainConfig, Drainer, OutboxKind};
use outbox_migrations::OutboxRingMigrator;
use outbox_seaorm::ring::{self, partition_of, PARTITIONS, SPAN};
use outbox_seaorm::{begin_write, write_region, ObjectId, OutboxMessage, ShardId};
use outbox_testing::database::TestDatabase;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use sea_orm_migration::MigratorTrait;

fn message(shard: i64, object: i64) -> OutboxMessage<OutboxCategory> {
    OutboxMessage::new(
        OutboxCategory::OrganizationUpdate,
        ShardId(shard),
        ObjectId(object),
    )
}

fn sql(text: &str) -> Statement {
    Statement::from_string(DbBackend::Postgres, text)
}

/// A PostgreSQL test database with the partition ring (opted into).
async fn ring_database(label: &str) -> TestDatabase {
    let t = database(DbBackend::Postgres, label).await;
    OutboxRingMigrator::up(&t.db, None).await.unwrap();
    assert!(ring::is_partitioned(&t.db).await.unwrap());
    t
}

/// The next id written is `next`.
async fn next_id_is(db: &DatabaseConnection, next: i64) {
    db.execute_raw(sql(&format!(
        "SELECT setval('region_outbox_ids', {next}, false)"
    )))
    .await
    .unwrap();
}

async fn query_i64(db: &impl ConnectionTrait, text: &str) -> i64 {
    db.query_one_raw(sql(text))
        .await
        .unwrap()
        .unwrap()
        .try_get_by_index(0)
        .unwrap()
}

async fn size(db: &DatabaseConnection, partition: &str) -> i64 {
    query_i64(db, &format!("SELECT pg_relation_size('{partition}')")).await
}

/// Each stored row's id and the partition that holds it.
async fn placement(db: &DatabaseConnection) -> Vec<(i64, String)> {
    db.query_all_raw(sql(
        "SELECT id, tableoid::regclass::text AS partition FROM region_outbox ORDER BY id",
    ))
    .await
    .unwrap()
    .iter()
    .map(|row| {
        (
            row.try_get("", "id").unwrap(),
            row.try_get("", "partition").unwrap(),
        )
    })
    .collect()
}

fn drainer(t: &TestDatabase, recorder: &Recorder) -> Drainer<OutboxCategory> {
    Drainer::builder(t.store(), recorder.receivers())
        .config(DrainConfig::default())
        .build()
}

/// Rows of one shard written on both sides of a partition boundary, and on
/// both sides of the ring's wrap back to the first partition (whose older
/// rows are still pending), are delivered in id order; the partitions hold
/// them as `partition_of` says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_across_partition_boundaries_and_the_wrap_are_delivered_in_order() {
    let t = ring_database("ring_order").await;
    let mut written = Vec::new();
    for start in [SPAN - 2, PARTITIONS * SPAN - 2] {
        next_id_is(&t.db, start).await;
        for object in 0..4 {
            // Shard 7 throughout, another shard in between.
            written.push(
                write_region(&t.db, message(7, start + object))
                    .await
                    .unwrap()
                    .id,
            );
            write_region(&t.db, message(8, object)).await.unwrap();
        }
    }
    let placed = placement(&t.db).await;
    for (id, partition) in &placed {
        assert_eq!(
            partition,
            &partition_of(OutboxKind::Region, *id),
            "row {id}"
        );
    }
    let partitions: std::collections::BTreeSet<_> = placed.iter().map(|(_, p)| p.clone()).collect();
    assert_eq!(
        partitions.into_iter().collect::<Vec<_>>(),
        ["region_outbox_p0", "region_outbox_p1", "region_outbox_p2"],
        "the rows span every partition, the wrap included"
    );

    let recorder = Recorder::new();
    drain_everything(&t, &drainer(&t, &recorder)).await;
    let shard_7: Vec<i64> = recorder
        .deliveries()
        .iter()
        .filter(|d| d.shard.identifier() == 7)
        .map(|d| d.id)
        .collect();
    assert_eq!(shard_7, written, "shard 7 in id order");
}

/// Once the sequence has moved on and its rows are delivered, a partition
/// is emptied, while a transaction holds the xmin horizon back (vacuum could
/// remove none of its dead rows); the partition the sequence writes into is
/// kept, and so is one with a pending row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_partition_is_emptied_under_a_pinned_horizon() {
    let t = ring_database("ring_truncate").await;
    let pin = t.connect_again(1).await.unwrap();
    pin.execute_unprepared("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .unwrap();
    // A snapshot of its own, as a report on other tables takes (one that
    // read the outbox would also hold its lock, and the partition would be
    // busy until it ends).
    query_i64(&pin, "SELECT count(*) FROM outbox_shard_state").await;

    next_id_is(&t.db, SPAN - 200).await;
    for object in 0..200 {
        write_region(&t.db, message(object % 10, object))
            .await
            .unwrap();
    }
    let recorder = Recorder::new();
    let drainer = drainer(&t, &recorder);
    drain_everything(&t, &drainer).await;
    // Into p1 now; p0 holds only dead rows, which vacuum may not remove.
    write_region(&t.db, message(1, 1)).await.unwrap();
    t.db.execute_unprepared("VACUUM region_outbox")
        .await
        .unwrap();
    assert!(size(&t.db, "region_outbox_p0").await > 0);

    // What operators read sums the partitions.
    let health = t.store().table_health(OutboxKind::Region).await.unwrap();
    assert!(health.dead_tuples.is_some(), "{health:?}");

    let report = ring::truncate_drained(&t.db, OutboxKind::Region)
        .await
        .unwrap();
    assert_eq!(report.truncated, ["region_outbox_p0"], "{report:?}");
    assert!(report.busy.is_empty());
    assert_eq!(size(&t.db, "region_outbox_p0").await, 0);
    assert_eq!(
        placement(&t.db).await.len(),
        1,
        "the current partition's row is kept"
    );

    // p1 is current while its row is pending; once the sequence moves on,
    // its pending row still keeps it.
    next_id_is(&t.db, 2 * SPAN).await;
    write_region(&t.db, message(2, 2)).await.unwrap();
    let report = ring::truncate_drained(&t.db, OutboxKind::Region)
        .await
        .unwrap();
    assert_eq!(report, ring::RingReport::default(), "nothing to empty");
    assert_eq!(placement(&t.db).await.len(), 2);

    drain_everything(&t, &drainer).await;
    let report = ring::truncate_drained(&t.db, OutboxKind::Region)
        .await
        .unwrap();
    assert_eq!(report.truncated, ["region_outbox_p1"], "{report:?}");
    assert!(
        size(&t.db, "region_outbox_p2").await > 0,
        "the current one is kept"
    );
    pin.execute_unprepared("ROLLBACK").await.unwrap();
    pin.close().await.unwrap();
}

/// A transaction that wrote into a partition the sequence has moved past,
/// and has not committed: its row is invisible, so the partition looks
/// empty. With a short lock timeout the truncation gives up (busy); with a
/// long one it waits, the writer commits meanwhile, and the second look
/// under the lock sees the row: nothing is emptied, and the row is
/// delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partition_with_an_open_writer_is_not_emptied() {
    let t = ring_database("ring_writer").await;
    next_id_is(&t.db, SPAN - 1).await;
    let writer = begin_write(&t.db).await.unwrap();
    let late = write_region(&writer, message(3, 1)).await.unwrap();
    assert_eq!(
        partition_of(OutboxKind::Region, late.id),
        "region_outbox_p0"
    );
    write_region(&t.db, message(4, 1)).await.unwrap();

    let report = ring::truncate_drained(&t.db, OutboxKind::Region)
        .await
        .unwrap();
    assert_eq!(report.busy, ["region_outbox_p0"], "{report:?}");
    assert!(report.truncated.is_empty());

    let waiting = tokio::spawn({
        let db = t.db.clone();
        async move {
            ring::truncate_drained_within(&db, OutboxKind::Region, Duration::from_secs(60))
                .await
                .unwrap()
        }
    });
    // The truncation waits for the writer's lock.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while query_i64(
        &t.db,
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    .await
        == 0
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the truncation never waited"
        );
        tokio::task::yield_now().await;
    }
    writer.commit().await.unwrap();
    let report = waiting.await.unwrap();
    assert_eq!(
        report,
        ring::RingReport::default(),
        "the row is seen under the lock"
    );

    let recorder = Recorder::new();
    drain_everything(&t, &drainer(&t, &recorder)).await;
    let ids: Vec<i64> = recorder.deliveries().iter().map(|d| d.id).collect();
    assert!(ids.contains(&late.id), "{ids:?}");
}

/// Many interleavings: writers write across three partition boundaries (the
/// sequence jumps ahead to each one, the last back into the first
/// partition) while a drain and a truncation loop run without pause. Every
/// row written is delivered once, each shard in id order, and partitions
/// were emptied along the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_a_drain_and_truncations_at_once_lose_nothing() {
    let t = ring_database("ring_stress").await;
    let stop = Arc::new(AtomicBool::new(false));
    let truncations = Arc::new(AtomicUsize::new(0));
    let truncator = tokio::spawn({
        let (db, stop, truncations) = (t.db.clone(), stop.clone(), truncations.clone());
        async move {
            while !stop.load(Ordering::Relaxed) {
                let report = ring::truncate_drained_within(
                    &db,
                    OutboxKind::Region,
                    Duration::from_millis(5),
                )
                .await
                .unwrap();
                truncations.fetch_add(report.truncated.len(), Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        }
    });
    let recorder = Recorder::new();
    let drainer = drainer(&t, &recorder);
    let drain = tokio::spawn({
        let (drainer, stop) = (drainer.clone(), stop.clone());
        async move {
            while !stop.load(Ordering::Relaxed) {
                drainer.drain_due(OutboxKind::Region).await.unwrap();
                tokio::task::yield_now().await;
            }
        }
    });

    let mut written = Vec::new();
    for boundary in 1..=PARTITIONS {
        next_id_is(&t.db, boundary * SPAN - 60).await;
        let writers: Vec<_> = (0..4)
            .map(|writer| {
                let db = t.db.clone();
                tokio::spawn(async move {
                    let mut ids = Vec::new();
                    for n in 0..30 {
                        let shard = (writer + n) % 6;
                        let txn = begin_write(&db).await.unwrap();
                        // An object of its own per row: two rows of one
                        // object read together are coalesced (only the
                        // later one delivered), and a drain that lags a
                        // boundary behind would then read one written at
                        // each.
                        let object = boundary * 1_000 + writer * 100 + n;
                        ids.push(write_region(&txn, message(shard, object)).await.unwrap().id);
                        txn.commit().await.unwrap();
                    }
                    ids
                })
            })
            .collect();
        for writer in writers {
            written.extend(writer.await.unwrap());
        }
    }
    // Let the drain catch up, and the truncations empty the two partitions
    // the sequence has left (the last boundary wrapped into p0); then stop.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while t.store().pending_count(OutboxKind::Region).await.unwrap() > 0
        || size(&t.db, "region_outbox_p1").await > 0
        || size(&t.db, "region_outbox_p2").await > 0
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not drained and emptied"
        );
        tokio::task::yield_now().await;
    }
    stop.store(true, Ordering::Relaxed);
    drain.await.unwrap();
    truncator.await.unwrap();
    drain_everything(&t, &drainer).await;

    let deliveries = recorder.deliveries();
    let mut delivered: Vec<i64> = deliveries.iter().map(|d| d.id).collect();
    delivered.sort_unstable();
    written.sort_unstable();
    assert_eq!(delivered, written, "every row once");
    let mut by_shard: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for d in &deliveries {
        by_shard.entry(d.shard.identifier()).or_default().push(d.id);
    }
    for (shard, ids) in by_shard {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "shard {shard}: {ids:?}"
        );
    }
    assert!(
        truncations.load(Ordering::Relaxed) > 0,
        "partitions were emptied during the run"
    );
}

/// Without the ring (the default migrations) there is nothing to empty:
/// the tables are not partitioned, and their rows are left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_ring_nothing_is_truncated() {
    let t = database(DbBackend::Postgres, "ring_absent").await;
    assert!(!ring::is_partitioned(&t.db).await.unwrap());
    write_region(&t.db, message(1, 1)).await.unwrap();
    let report = ring::truncate_drained(&t.db, OutboxKind::Region)
        .await
        .unwrap();
    assert_eq!(report, ring::RingReport::default());
    assert_eq!(
        t.store().pending_count(OutboxKind::Region).await.unwrap(),
        1
    );
}

/// The plan of a prepared shard read on `connection`, as it would run now.
async fn shard_read_plan(connection: &DatabaseConnection) -> String {
    connection
        .query_all_raw(sql("EXPLAIN EXECUTE shard_read(1, 7)"))
        .await
        .unwrap()
        .iter()
        .map(|row| row.try_get_by_index::<String>(0).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A plan PostgreSQL keeps for a prepared statement (sqlx prepares every
/// statement; PostgreSQL keeps a generic plan after five runs) was made
/// with the partitions' statistics of that moment: made while those of the
/// partition the sequence writes into said it was empty, it reads the
/// partition sequentially, for every shard, however full it grows. The ring's upkeep
/// refreshes the partition's statistics as it grows, so that the plan is
/// made again: through the shard index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_partition_being_written_gets_statistics_as_it_grows() {
    let t = ring_database("ring_statistics").await;
    let current = partition_of(OutboxKind::Region, 1);
    // Statistics taken while it was empty, as autovacuum takes them after
    // a truncation (the ring's partitions are analyzed after 1,000 changes).
    // Autovacuum is kept off it, so that only the upkeep takes them again.
    t.db.execute_unprepared(&format!(
        "ALTER TABLE {current} SET (autovacuum_enabled = false); ANALYZE {current}"
    ))
    .await
    .unwrap();
    let reader = t.connect_again(1).await.unwrap();
    reader
        .execute_unprepared(
            "SET plan_cache_mode = force_generic_plan;
             PREPARE shard_read(int, bigint) AS
             SELECT * FROM region_outbox o
             WHERE o.shard_scope = $1 AND o.shard_identifier = $2
             ORDER BY o.shard_scope, o.shard_identifier, o.id LIMIT 10",
        )
        .await
        .unwrap();
    let empty = shard_read_plan(&reader).await;
    assert!(
        empty.contains(&format!("Seq Scan on {current}")),
        "planned on the empty partition: {empty}"
    );

    for object in 0..3_000 {
        write_region(&t.db, message(object % 100, object))
            .await
            .unwrap();
    }
    assert_eq!(shard_read_plan(&reader).await, empty, "the kept plan");
    let report = ring::truncate_drained(&t.db, OutboxKind::Region)
        .await
        .unwrap();
    assert_eq!(report.analyzed, vec![current.clone()]);
    let grown = shard_read_plan(&reader).await;
    assert!(
        grown.contains(&format!(
            "Index Scan using {current}_shard_scope_shard_identifier_id_idx"
        )),
        "planned again: {grown}"
    );
    // Not again until it has doubled.
    let report = ring::truncate_drained(&t.db, OutboxKind::Region)
        .await
        .unwrap();
    assert!(report.analyzed.is_empty(), "{report:?}");
}
