//! Rule 11: a receiver never gets a row of a shard after a row of the same
//! shard with a higher id, even when the transactions that wrote them
//! commit in the other order.
//!
//! Ids come from a sequence when a row is written, so two transactions that
//! write one shard at once get ids in write order and may commit in the
//! other. PostgreSQL: the write takes a transaction-level lock of the shard
//! (in the insert statement, before its ids are drawn), so a second writer
//! of the shard waits for the first one's commit or rollback and its ids
//! are higher. SQLite: one transaction writes at a time and holds the write
//! lock from its first write to its end, so ids commit in order anyway.

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::time::Duration;

use common::{database, drain_everything, number, OutboxCategory, Recorder};
use outbox_core::{DrainConfig, Drainer, OutboxKind};
use outbox_seaorm::{begin_write, write_region, ClaimOn, ObjectId, OutboxMessage, ShardId};
use sea_orm::{ConnectionTrait, DbBackend, TransactionTrait};

fn message(object: i64) -> OutboxMessage<OutboxCategory> {
    OutboxMessage::new(
        OutboxCategory::OrganizationUpdate,
        ShardId(7),
        ObjectId(object),
    )
}

async fn sessions_waiting_on_a_lock(db: &impl ConnectionTrait) -> i64 {
    number(
        db,
        "SELECT count(*) AS n FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    .await
}

/// Transaction A writes shard 7 and stays open; transaction B writes shard
/// 7 too, claims it before its commit, commits and flushes; a background
/// round runs; then A commits, and the drain delivers what is left. On a
/// store that lets B commit first (main before rule 11), the receiver gets
/// B's row, then A's lower id. With the shard lock, B waits for A: the
/// receiver gets A's row first, whichever path delivers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rows_of_one_shard_reach_the_receiver_in_id_order_whatever_the_commit_order() {
    let t = database(DbBackend::Postgres, "commit_order").await;
    let recorder = Recorder::new();
    let drainer = Drainer::builder(t.store(), recorder.receivers())
        .config(DrainConfig::default())
        .build();

    let a = begin_write(&t.db).await.unwrap();
    let a_row = write_region(&a, message(1)).await.unwrap();
    let b = tokio::spawn({
        let (db, drainer) = (t.db.clone(), drainer.clone());
        async move {
            let b = begin_write(&db).await.unwrap();
            let row = write_region(&b, message(2)).await.unwrap();
            let mut flush = drainer.prepare_flush([(row.shard.clone(), row.id)]);
            flush.claim(&ClaimOn(&b)).await.unwrap();
            b.commit().await.unwrap();
            let outcome = flush.deliver().await;
            (row.id, outcome)
        }
    });
    // B has committed and flushed, or waits for A's lock.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !b.is_finished() && sessions_waiting_on_a_lock(&t.db).await == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "B neither finished nor waited"
        );
        tokio::task::yield_now().await;
    }
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    a.commit().await.unwrap();
    let (b_id, _) = b.await.unwrap();
    assert!(b_id > a_row.id);
    drainer.settled().await;
    drain_everything(&t, &drainer).await;

    let ids: Vec<i64> = recorder.deliveries().iter().map(|d| d.id).collect();
    assert_eq!(ids, vec![a_row.id, b_id], "the shard's rows in id order");
}

/// Writers of different shards do not wait for each other: B writes shard
/// 8 and commits while A, which wrote shard 7, is still open.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_of_different_shards_do_not_wait_for_each_other() {
    let t = database(DbBackend::Postgres, "commit_order_shards").await;
    let a = begin_write(&t.db).await.unwrap();
    write_region(&a, message(1)).await.unwrap();
    let b = t.db.begin().await.unwrap();
    let other = OutboxMessage::new(OutboxCategory::OrganizationUpdate, ShardId(8), ObjectId(1));
    tokio::time::timeout(Duration::from_secs(30), async {
        write_region(&b, other).await.unwrap();
        b.commit().await.unwrap();
    })
    .await
    .expect("a writer of another shard does not wait");
    a.rollback().await.unwrap();
}

/// SQLite: while a transaction that wrote an outbox row is open, no other
/// connection can write one (one writer at a time, holding the lock to its
/// end), so a later id cannot commit before an earlier one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_has_one_writer_at_a_time() {
    let t = database(DbBackend::Sqlite, "commit_order_sqlite").await;
    let a = begin_write(&t.db).await.unwrap();
    let a_row = write_region(&a, message(1)).await.unwrap();
    let other = outbox_testing::database::connect(&t.url, 1).await.unwrap();
    other
        .execute_unprepared("PRAGMA busy_timeout = 0")
        .await
        .unwrap();
    let refused = write_region(&other, message(2)).await;
    assert!(
        refused.is_err(),
        "a second writer while A is open: {refused:?}"
    );
    a.commit().await.unwrap();
    let b_row = write_region(&other, message(2)).await.unwrap();
    assert!(b_row.id > a_row.id);
}

/// The lock comes before the id: a writer that waits for the shard draws
/// its id after the wait, so it is higher than the id of a row of another
/// shard written while it waited (drawn before the wait, it would be lower,
/// and could commit after a higher id of its own shard).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_that_waits_for_its_shard_draws_its_id_after_the_wait() {
    let t = database(DbBackend::Postgres, "commit_order_id_after_wait").await;
    for rows in [1, 3] {
        let a = begin_write(&t.db).await.unwrap();
        write_region(&a, message(1)).await.unwrap();
        let waiting = tokio::spawn({
            let db = t.db.clone();
            async move {
                let b = begin_write(&db).await.unwrap();
                // One row, or several rows of the shard and another.
                let mut batch = vec![message(2)];
                for object in 3..=rows {
                    batch.push(OutboxMessage::new(
                        OutboxCategory::OrganizationUpdate,
                        ShardId(100 + object),
                        ObjectId(object),
                    ));
                }
                let written = outbox_seaorm::write_region_many(&b, batch).await.unwrap();
                b.commit().await.unwrap();
                written.iter().map(|row| row.id).min().unwrap()
            }
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while sessions_waiting_on_a_lock(&t.db).await == 0 {
            assert!(tokio::time::Instant::now() < deadline, "B never waited");
            assert!(!waiting.is_finished(), "B did not wait for the shard");
            tokio::task::yield_now().await;
        }
        let other = OutboxMessage::new(OutboxCategory::OrganizationUpdate, ShardId(8), ObjectId(1));
        let meanwhile = write_region(&t.db, other).await.unwrap().id;
        a.commit().await.unwrap();
        let b_first = waiting.await.unwrap();
        assert!(
            b_first > meanwhile,
            "{rows} rows: B's ids ({b_first}…) were drawn after its wait, above {meanwhile}"
        );
    }
}
