//! How the SQL stores claim, beyond the rules the conformance suite checks:
//! the statements' buckets are the core's, a synchronous flush costs two
//! statements, a crash that empties PostgreSQL's unlogged bucket table
//! ends every lease without losing anything, and a background claim reads
//! each bucket row at most twice.

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::sync::{Arc, Mutex};

use chrono::Utc;
use common::{database, number, OutboxCategory, OutboxScope, Recorder};
use outbox_core::store::{
    ClaimRequest, CommitBatch, DrainStore, ShardClaim, ShardCommit, ShardEnd, StoreAdmin,
};
use outbox_core::{Drainer, OutboxKind, ShardKey};
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, SeaOrmStore, ShardId};
use sea_orm::{ConnectionTrait, DbBackend};

fn request(token: i64) -> ClaimRequest {
    let now = Utc::now();
    ClaimRequest {
        kind: OutboxKind::Region,
        now,
        lease_until: now + chrono::Duration::seconds(30),
        token,
        owner: format!("test-{token}"),
        rows: 100,
        up_to_id: None,
        order: outbox_core::store::ClaimOrder::Oldest,
        beyond: 0,
        shard_rows: usize::MAX,
        held_rows: 0,
    }
}

fn org(id: i64) -> ShardKey {
    ShardKey::region(OutboxScope::OrganizationScope, id)
}

async fn write(db: &sea_orm::DatabaseConnection, shard: &ShardKey) -> i64 {
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

/// Pairs of shards that share a bucket by the core's function, negative and
/// huge identifiers included: while one is claimed, a due row of the other is
/// not claimable, and a shard of another bucket is.
async fn the_statements_hash_shards_into_the_cores_buckets(backend: DbBackend) {
    let t = database(backend, "sql_buckets").await;
    let store = t.store();
    for (a, b) in [
        (7, 7 + 1024),
        (-1, 1023),
        (i64::MAX, i64::MAX - 1024),
        (i64::MIN + 5, i64::MIN + 5 + 3 * 1024),
    ] {
        let (a, b) = (org(a), org(b));
        assert_eq!(a.bucket(), b.bucket(), "{a} {b}");
        let other = org(a.identifier().wrapping_add(1));
        assert_ne!(a.bucket(), other.bucket());
        write(&t.db, &a).await;
        write(&t.db, &b).await;
        write(&t.db, &other).await;
        let ShardClaim::Claimed(claimed) = store.claim_shard(&request(1), &a).await.unwrap() else {
            panic!("{a} should be free");
        };
        assert_eq!(claimed.rows.len(), 1);
        let shards: Vec<ShardKey> = store
            .claim_due(&request(2))
            .await
            .unwrap()
            .shards
            .into_iter()
            .map(|claimed| claimed.shard)
            .collect();
        assert_eq!(shards, vec![other.clone()], "{b} shares the held bucket");
        // Clean up for the next pair: everything delivered and released.
        for (token, shard) in [(1, &a), (2, &other)] {
            store
                .commit(&CommitBatch {
                    kind: OutboxKind::Region,
                    token,
                    now: Utc::now(),
                    shards: vec![ShardCommit {
                        shard: shard.clone(),
                        delete_ids: Vec::new(),
                        dead_letters: Vec::new(),
                        end: ShardEnd::Done,
                    }],
                    in_flight: Vec::new(),
                    renew_until: Utc::now(),
                })
                .await
                .unwrap();
        }
        t.db.execute_unprepared("DELETE FROM region_outbox")
            .await
            .unwrap();
    }
}

outbox_testing::on_both_backends!(the_statements_hash_shards_into_the_cores_buckets);

/// The flush claimed after a commit ([`Drainer::drain_shard`]), on a free
/// shard: one statement claims
/// the bucket and reads the rows, one deletes them and releases the bucket.
/// No transaction of its own, so no synchronous commit of its own either.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sync_flush_of_a_free_shard_takes_two_statements() {
    let t = database(DbBackend::Postgres, "two_statements").await;
    let shard = org(42);
    let id = write(&t.db, &shard).await;
    let mut db = t.connect_again(2).await.unwrap();
    let statements: Arc<Mutex<Vec<String>>> = Arc::default();
    db.set_metric_callback({
        let statements = statements.clone();
        move |info| {
            statements
                .lock()
                .unwrap()
                .push(info.statement.sql.lines().next().unwrap_or("").to_owned())
        }
    });
    let recorder = Recorder::new();
    let drainer = Drainer::new(SeaOrmStore::new(db).unwrap(), recorder.receivers());
    // The runtime controls are read at most once a second
    // (`controls_refresh`), not per flush: read them before counting.
    drainer.drain_shard(&org(43), None).await.unwrap();
    statements.lock().unwrap().clear();
    let report = drainer.drain_shard(&shard, Some(id)).await.unwrap();
    assert_eq!(report.deliveries, 1);
    let statements = statements.lock().unwrap().clone();
    assert_eq!(
        statements,
        vec![
            "-- Leases the bucket of one shard and reads its rows (the synchronous flush",
            "-- The common commit, in one statement: every shard of the claim is done,",
        ]
    );
}

/// A PostgreSQL crash empties unlogged tables, the bucket leases with them:
/// the worker that held a lease can no longer commit (fencing: nothing of
/// its round is written), and the next claim recreates the buckets.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_that_empties_the_bucket_table_ends_every_lease() {
    let t = database(DbBackend::Postgres, "emptied_buckets").await;
    let store = t.store();
    let id = write(&t.db, &org(1)).await;
    let claimed = store.claim_due(&request(1)).await.unwrap().shards;
    assert_eq!(claimed.len(), 1);
    t.db.execute_unprepared("TRUNCATE outbox_claim_bucket")
        .await
        .unwrap();
    let outcome = store
        .commit(&CommitBatch {
            kind: OutboxKind::Region,
            token: 1,
            now: Utc::now(),
            shards: vec![ShardCommit {
                shard: org(1),
                delete_ids: vec![id],
                dead_letters: Vec::new(),
                end: ShardEnd::Done,
            }],
            in_flight: Vec::new(),
            renew_until: Utc::now(),
        })
        .await
        .unwrap();
    assert_eq!((outcome.deleted, outcome.lost), (0, vec![org(1)]));
    assert_eq!(
        store
            .renew(OutboxKind::Region, 1, Utc::now(), Utc::now())
            .await
            .unwrap(),
        0
    );
    let recorder = Recorder::new();
    let drainer = Drainer::new(store.clone(), recorder.receivers());
    assert_eq!(
        drainer
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .deliveries,
        1
    );
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
    let buckets = number(&t.db, "SELECT count(*) AS n FROM outbox_claim_bucket").await;
    assert_eq!(buckets, 1, "the bucket's row was created again");
}

/// A crash may restart the fencing sequence a few dozen values back (values
/// handed out that it had not written to disk), and empties the bucket
/// table: the claim that creates a bucket row again moves the sequence far
/// forward first, so every token after the crash is higher than every token
/// before it, whichever claim comes first (a round's, or a flush's after
/// its commit).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fencing_tokens_keep_growing_across_a_crash_that_empties_the_bucket_table() {
    let t = database(DbBackend::Postgres, "fence_after_crash").await;
    let store = t.store();
    let crash = |back_to: i64| {
        let db = t.db.clone();
        async move {
            db.execute_unprepared("TRUNCATE outbox_claim_bucket")
                .await
                .unwrap();
            db.execute_unprepared(&format!("SELECT setval('outbox_fence', {back_to})"))
                .await
                .unwrap();
        }
    };
    let fence_of = |claimed: &outbox_core::store::ClaimedShard| claimed.fence.get();
    // As if a thousand claims had been made.
    t.db.execute_unprepared("SELECT setval('outbox_fence', 1000)")
        .await
        .unwrap();

    write(&t.db, &org(1)).await;
    let before = fence_of(&store.claim_due(&request(1)).await.unwrap().shards[0]);
    crash(before - 30).await;
    write(&t.db, &org(2)).await;
    let after = fence_of(&store.claim_due(&request(2)).await.unwrap().shards[0]);
    assert!(
        after > before,
        "a round after the crash: {after} > {before}"
    );

    crash(after - 30).await;
    let ShardClaim::Claimed(claimed) = store.claim_shard(&request(3), &org(3)).await.unwrap()
    else {
        panic!("the shard's bucket is free");
    };
    assert!(
        fence_of(&claimed) > after,
        "a flush after the crash: {} > {after}",
        fence_of(&claimed)
    );
}

/// A statistic of PostgreSQL's (`sql`, one number `n`), once
/// `connection`'s backend has reported what it did.
async fn reported(
    t: &outbox_testing::database::TestDatabase,
    connection: &sea_orm::DatabaseConnection,
    sql: &str,
) -> i64 {
    // Reported when the backend goes idle after this statement, at once.
    connection
        .execute_unprepared("SELECT pg_stat_force_next_flush()")
        .await
        .unwrap();
    number(&t.db, sql).await
}

/// The bucket table's rows fetched by index so far, as PostgreSQL counts
/// them.
async fn bucket_rows_fetched(
    t: &outbox_testing::database::TestDatabase,
    connection: &sea_orm::DatabaseConnection,
) -> i64 {
    let sql =
        "SELECT idx_tup_fetch AS n FROM pg_stat_user_tables WHERE relname = 'outbox_claim_bucket'";
    reported(t, connection, sql).await
}

/// A background claim reads a bucket row through its key at most twice:
/// once for every bucket of its scan (leased or not, and which version),
/// once more, locking it, for each bucket it leases; the lease is written
/// through the locked version's address. Every read walks the versions the
/// row's updates left while vacuum's horizon is held back, so a claim that
/// read each row four or five times (as the first design did) slowed with
/// every claim made under a long transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_reads_each_bucket_row_at_most_twice() {
    let t = database(DbBackend::Postgres, "bucket_reads").await;
    // One connection, so that the claims' backend is the one that reports.
    let db = t.connect_again(1).await.unwrap();
    let store = SeaOrmStore::new(db.clone()).unwrap();
    // 600 shards of 600 buckets; a claim leases at most 512 of them.
    for id in 0..600 {
        write(&t.db, &org(id)).await;
    }
    assert_eq!(
        (0..600)
            .map(|id| org(id).bucket())
            .collect::<std::collections::HashSet<_>>()
            .len(),
        600
    );
    for order in [
        outbox_core::store::ClaimOrder::Oldest,
        outbox_core::store::ClaimOrder::Newest,
    ] {
        let before = bucket_rows_fetched(&t, &db).await;
        let mut request = request(i64::from(order == outbox_core::store::ClaimOrder::Newest) + 1);
        request.rows = 1_000;
        request.order = order;
        let claim = store.claim_due(&request).await.unwrap();
        let fetched = bucket_rows_fetched(&t, &db).await - before;
        let leased = claim
            .shards
            .iter()
            .map(|claimed| claimed.shard.bucket())
            .collect::<std::collections::HashSet<_>>()
            .len() as i64;
        // The first claim scans all 600 buckets and leases 512; the second
        // scans the 600 again (512 of them now held) and leases the other 88.
        let scanned_buckets = 600;
        assert!(leased > 0, "{order:?} leased nothing");
        assert!(
            fetched <= scanned_buckets + leased,
            "{order:?}: {fetched} bucket rows read for {scanned_buckets} buckets scanned and {leased} leased"
        );
    }
}

/// The entries of the bucket table's index read so far: one for every
/// version a read through the key visits that is not on a HOT chain.
async fn bucket_entries_read(
    t: &outbox_testing::database::TestDatabase,
    connection: &sea_orm::DatabaseConnection,
) -> i64 {
    let sql = "SELECT sum(idx_tup_read)::bigint AS n FROM pg_stat_user_indexes
               WHERE relname = 'outbox_claim_bucket'";
    reported(t, connection, sql).await
}

/// While vacuum's horizon is held back, every update of a bucket row leaves
/// a version nothing may remove, and a read through the key visits each
/// one: after minutes under a long transaction, thousands per bucket, and
/// every claim and release slower than the last. A claim and its commit
/// read the row of a bucket this process wrote last where they left it (a
/// TID scan): no index entry read, whatever lies behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_a_held_back_horizon_a_round_reads_its_buckets_where_it_left_them() {
    let t = database(DbBackend::Postgres, "bucket_addresses").await;
    let db = t.connect_again(1).await.unwrap();
    let store = SeaOrmStore::new(db.clone()).unwrap();
    let shard = org(1);
    let pin = t.connect_again(1).await.unwrap();
    pin.execute_unprepared("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .unwrap();
    number(&pin, "SELECT count(*) AS n FROM outbox_shard_state").await;
    // 2,000 versions of the shard's bucket row behind the horizon, as two
    // rounds a second leave in about twenty minutes. On a connection of
    // their own whose statistics are reported before the rounds: the index
    // entries these updates read would otherwise be reported whenever its
    // backend next flushes (PostgreSQL waits a second or more between
    // flushes), perhaps in the middle of a round's count.
    let updater = t.connect_again(1).await.unwrap();
    for _ in 0..2_000 {
        updater
            .execute_unprepared(&format!(
                "UPDATE outbox_claim_bucket SET version = version + 1 \
                 WHERE kind = 0 AND bucket = {}",
                shard.bucket()
            ))
            .await
            .unwrap();
    }
    // Reported when the backend goes idle after this statement.
    updater
        .execute_unprepared("SELECT pg_stat_force_next_flush()")
        .await
        .unwrap();
    updater.close().await.unwrap();

    let mut reads = Vec::new();
    for token in 1..=3 {
        let id = write(&t.db, &shard).await;
        let before = bucket_entries_read(&t, &db).await;
        let claim = store.claim_due(&request(token)).await.unwrap();
        let claimed = bucket_entries_read(&t, &db).await;
        assert_eq!(claim.shards.len(), 1, "round {token}: {claim:?}");
        let outcome = store
            .commit(&CommitBatch {
                kind: OutboxKind::Region,
                token,
                now: Utc::now(),
                shards: vec![ShardCommit {
                    shard: shard.clone(),
                    delete_ids: vec![id],
                    dead_letters: Vec::new(),
                    end: ShardEnd::Done,
                }],
                in_flight: Vec::new(),
                renew_until: Utc::now(),
            })
            .await
            .unwrap();
        assert_eq!(
            (outcome.deleted, outcome.lost.len()),
            (1, 0),
            "round {token}"
        );
        let committed = bucket_entries_read(&t, &db).await;
        reads.push((claimed - before, committed - claimed));
    }
    // The first claim knows no address: it reads the row through its key
    // (each entry it reads starts a HOT chain of versions on one page, which
    // it walks too); from then on, where it was left.
    assert!(
        reads[0].0 > 0,
        "the first claim read no index entry: {reads:?}"
    );
    for (round, &(claim, commit)) in reads.iter().enumerate() {
        assert_eq!(commit, 0, "round {}: {reads:?}", round + 1);
        if round > 0 {
            assert_eq!(claim, 0, "round {}: {reads:?}", round + 1);
        }
    }
    pin.execute_unprepared("ROLLBACK").await.unwrap();
}

/// A bucket's address is a hint: another process's store (its own
/// addresses) that took the bucket after this one's lease ended leaves this
/// one's address stale, and the stale address neither releases the other's
/// lease nor lets this store lease the bucket again while the other holds
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stale_address_neither_releases_nor_takes_another_holders_lease() {
    let t = database(DbBackend::Postgres, "stale_addresses").await;
    let first = SeaOrmStore::new(t.connect_again(1).await.unwrap()).unwrap();
    let second = SeaOrmStore::new(t.connect_again(1).await.unwrap()).unwrap();
    let shard = org(3);
    let done = |token: i64, now, ids: Vec<i64>| CommitBatch {
        kind: OutboxKind::Region,
        token,
        now,
        shards: vec![ShardCommit {
            shard: shard.clone(),
            delete_ids: ids,
            dead_letters: Vec::new(),
            end: ShardEnd::Done,
        }],
        in_flight: Vec::new(),
        renew_until: now,
    };
    // The first store claims and releases once: it knows the address.
    let id = write(&t.db, &shard).await;
    first.claim_due(&request(1)).await.unwrap();
    let outcome = first.commit(&done(1, Utc::now(), vec![id])).await.unwrap();
    assert_eq!(outcome.deleted, 1);

    // It claims again, with a lease that ends at once; the second store
    // takes the bucket after that end.
    let id = write(&t.db, &shard).await;
    let start = Utc::now();
    let mut short = request(2);
    short.now = start;
    short.lease_until = start + chrono::Duration::milliseconds(1);
    assert_eq!(first.claim_due(&short).await.unwrap().shards.len(), 1);
    let mut later = request(3);
    later.now = start + chrono::Duration::seconds(1);
    later.lease_until = start + chrono::Duration::seconds(60);
    assert_eq!(second.claim_due(&later).await.unwrap().shards.len(), 1);

    // The first store's commit, at the address of its own lease's version:
    // lost, nothing deleted, the second's lease kept.
    let outcome = first.commit(&done(2, start, vec![id])).await.unwrap();
    assert_eq!((outcome.deleted, outcome.lost), (0, vec![shard.clone()]));
    // Nor does it lease the bucket while the second holds it.
    let mut again = request(4);
    again.now = start + chrono::Duration::seconds(2);
    again.lease_until = start + chrono::Duration::seconds(62);
    assert!(first.claim_due(&again).await.unwrap().shards.is_empty());
    // The second's lease was untouched: it commits.
    let outcome = second
        .commit(&done(3, start + chrono::Duration::seconds(2), vec![id]))
        .await
        .unwrap();
    assert_eq!((outcome.deleted, outcome.lost.len()), (1, 0));
}
