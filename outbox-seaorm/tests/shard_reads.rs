//! How the PostgreSQL store reads one shard's rows (every claim, the
//! synchronous flush's claims, the deepest shards of the admin views): from
//! the shard index, from the shard's first entry to its last, and from no
//! other index, under the generic plans PostgreSQL keeps for prepared
//! statements. Forms of that read that went wrong before:
//!
//! - a row comparison on the whole key as the upper bound does not end a
//!   B-tree scan (PostgreSQL treats only its first column, the scope, as
//!   required): each shard's read went on to the end of its scope. Caught
//!   here by the shard index's pages each read touches (101 for one shard
//!   in that form, at most 40 allowed);
//! - equalities on the shard's columns and `id <=` the bound let a generic
//!   plan, made while a ring partition's statistics said it was small, read
//!   the shard through the id index, filtered by shard: a walk over every
//!   entry of the partition, the dead ones a held-back horizon keeps
//!   included. Checked here by the id index's entries read (none allowed),
//!   though this file's ring setup did not bring that plan about for that
//!   form; the vacuum-pressure bench under a pinned horizon did
//!   (`docs/benchmarks.md`, Design choices: per-shard reads).

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use chrono::Utc;
use common::{database, number, OutboxScope};
use outbox_core::store::{
    ClaimBeforeCommit, ClaimOrder, ClaimRequest, DrainStore, ShardClaim, StoreAdmin,
};
use outbox_core::{OutboxKind, ShardKey};
use outbox_migrations::OutboxRingMigrator;
use outbox_seaorm::{ClaimOn, SeaOrmStore};
use outbox_testing::database::TestDatabase;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend};
use sea_orm_migration::MigratorTrait;

/// Shards of the one scope the rows are written in.
const SHARDS: i64 = 20_000;

fn request(token: i64, order: ClaimOrder, rows: usize) -> ClaimRequest {
    let now = Utc::now();
    ClaimRequest {
        kind: OutboxKind::Region,
        now,
        // The leases end at once: every claim finds every bucket free.
        lease_until: now,
        token,
        owner: format!("test-{token}"),
        rows,
        up_to_id: None,
        order,
        beyond: 100,
        shard_rows: usize::MAX,
        held_rows: 0,
    }
}

fn org(id: i64) -> ShardKey {
    ShardKey::region(OutboxScope::OrganizationScope, id)
}

/// `rows` due rows, row `n` (from 0, in id order) in shard `shard(n)` of
/// the organization scope.
async fn fill(db: &DatabaseConnection, rows: i64, shard: &str) {
    // The organization scope's number in the tests' registry.
    let scope = 0;
    db.execute_unprepared(&format!(
        "INSERT INTO region_outbox (shard_scope, shard_identifier, category, object_identifier)
         SELECT {scope}, {shard}, 1, n FROM generate_series(0, {rows} - 1) AS n ORDER BY n"
    ))
    .await
    .unwrap();
}

/// A store on one connection of its own whose prepared statements always
/// get a generic plan (PostgreSQL's choice after five runs), so that its
/// statistics are the ones reported after each step.
async fn generic_store(t: &TestDatabase) -> (SeaOrmStore, DatabaseConnection) {
    let connection = t.connect_again(1).await.unwrap();
    connection
        .execute_unprepared("SET plan_cache_mode = force_generic_plan")
        .await
        .unwrap();
    (SeaOrmStore::new(connection.clone()).unwrap(), connection)
}

/// What `connection` has read so far of `region_outbox`'s indexes (its
/// partitions' in the ring) on `columns`: `idx_tup_read` (entries returned)
/// or `idx_blks_hit + idx_blks_read` (pages; a scan that goes past its
/// bound without returning what it passes shows only there).
async fn index_reads(
    t: &TestDatabase,
    connection: &DatabaseConnection,
    columns: &str,
    counter: &str,
) -> i64 {
    // Reported when the backend goes idle after this statement, at once.
    connection
        .execute_unprepared("SELECT pg_stat_force_next_flush()")
        .await
        .unwrap();
    number(
        &t.db,
        &format!(
            "SELECT COALESCE(sum({counter}), 0)::bigint AS n
             FROM pg_stat_user_indexes JOIN pg_statio_user_indexes USING (indexrelid)
             WHERE pg_stat_user_indexes.relname LIKE 'region_outbox%'
               AND pg_get_indexdef(indexrelid) LIKE '%btree ({columns})'"
        ),
    )
    .await
}

const SHARD_INDEX: &str = "shard_scope, shard_identifier, id";
const ID_INDEX: &str = "id";

/// What one read of `what` cost: the shard index's pages, the id index's
/// entries.
struct Cost {
    what: &'static str,
    shard_pages: i64,
    id_entries: i64,
}

async fn measured<F: std::future::Future<Output = usize>>(
    t: &TestDatabase,
    connection: &DatabaseConnection,
    what: &'static str,
    read: F,
) -> (usize, Cost) {
    let pages = "idx_blks_hit + idx_blks_read";
    let (shard, id) = (
        index_reads(t, connection, SHARD_INDEX, pages).await,
        index_reads(t, connection, ID_INDEX, "idx_tup_read").await,
    );
    let rows = read.await;
    let cost = Cost {
        what,
        shard_pages: index_reads(t, connection, SHARD_INDEX, pages).await - shard,
        id_entries: index_reads(t, connection, ID_INDEX, "idx_tup_read").await - id,
    };
    (rows, cost)
}

/// The rows of flush claims that must all have been taken.
fn claimed_rows(what: &str, claims: &[ShardClaim]) -> usize {
    claims
        .iter()
        .map(|claim| match claim {
            ShardClaim::Claimed(claimed) => claimed.rows.len(),
            other => panic!("{what}: {other:?}"),
        })
        .sum()
}

/// The rows a background claim from `order`'s end returned.
async fn due_rows(store: &SeaOrmStore, token: i64, order: ClaimOrder) -> usize {
    let claim = store.claim_due(&request(token, order, 8)).await.unwrap();
    claim.shards.iter().map(|shard| shard.rows.len()).sum()
}

/// Every statement that reads shards by range, once: the flushes on the
/// shards `flushed` (after a commit, before a commit, before a commit of
/// two), the background claims and the deepest shards on what they find.
async fn read_every_way(
    t: &TestDatabase,
    store: &SeaOrmStore,
    connection: &DatabaseConnection,
    flushed: [i64; 4],
) -> Vec<(usize, Cost)> {
    let flush = |token| request(token, ClaimOrder::Oldest, 100);
    let before_commit = |token, shards: &[i64]| {
        let shards: Vec<_> = shards.iter().map(|&id| (org(id), i64::MAX)).collect();
        async move {
            ClaimOn(connection)
                .claim_before_commit(&flush(token), &shards)
                .await
                .unwrap()
        }
    };
    vec![
        // The flush after a commit.
        measured(t, connection, "claim_shard", async {
            let claim = store.claim_shard(&flush(1), &org(flushed[0])).await;
            claimed_rows("claim_shard", &[claim.unwrap()])
        })
        .await,
        // The flush's claims before a commit, of one shard and of several.
        measured(t, connection, "claim_one_before_commit", async {
            let claims = before_commit(2, &flushed[1..2]).await;
            claimed_rows("claim_one_before_commit", &claims)
        })
        .await,
        measured(t, connection, "claim_before_commit", async {
            let claims = before_commit(3, &flushed[2..4]).await;
            claimed_rows("claim_before_commit", &claims)
        })
        .await,
        // A background claim from the newest end reads every shard it
        // leases by range.
        measured(
            t,
            connection,
            "claim_due_newest",
            due_rows(store, 4, ClaimOrder::Newest),
        )
        .await,
        // From the oldest end, a shard with more than one row in a full
        // window is read further by range.
        measured(
            t,
            connection,
            "claim_due_oldest",
            due_rows(store, 5, ClaimOrder::Oldest),
        )
        .await,
        // The deepest shards of the admin views, each shard's oldest rows.
        measured(t, connection, "deepest_shards", async {
            let depths = store.shard_depths(OutboxKind::Region, 3).await;
            depths.unwrap().len()
        })
        .await,
    ]
}

fn check(costs: &[(usize, Cost)], pages_per_read: i64) {
    let report: Vec<String> = costs
        .iter()
        .map(|(rows, cost)| {
            format!(
                "{}: {rows} rows, {} shard-index pages, {} id-index entries",
                cost.what, cost.shard_pages, cost.id_entries
            )
        })
        .collect();
    for (rows, cost) in costs {
        assert!(*rows > 0, "{} read nothing: {report:#?}", cost.what);
        assert_eq!(
            cost.id_entries, 0,
            "{} used the id index: {report:#?}",
            cost.what
        );
        assert!(
            cost.shard_pages <= pages_per_read,
            "{} read past its shards: {report:#?}",
            cost.what
        );
    }
}

/// Plain tables: thousands of shards of one scope, the shards read first
/// lowest in it; a read that went on to the end of its scope would read
/// every entry after its shard's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shards_read_ends_at_its_last_entry() {
    let t = database(DbBackend::Postgres, "shard_reads").await;
    // Shards 0..=3, the ones the flushes read, have 20 rows each, the
    // oldest ones (shard 0's first, so that the oldest end finds a deep
    // shard); the rest one each.
    fill(&t.db, 80, "n / 20").await;
    fill(&t.db, SHARDS, &format!("4 + n % {}", SHARDS - 4)).await;
    // The newest rows in the lowest shards after 3.
    fill(&t.db, 8, "4 + n").await;
    t.db.execute_unprepared("ANALYZE region_outbox")
        .await
        .unwrap();
    let (store, connection) = generic_store(&t).await;
    // Shard 0 the first of the scope.
    let costs = read_every_way(&t, &store, &connection, [0, 1, 2, 3]).await;
    // A few dozen rows each (claims return at most a shard's share), and
    // the B-tree's pages: far from the thousands after them.
    check(&costs, 40);
}

/// The partition ring, under a held-back horizon: the partition being read
/// holds thousands of dead entries (delivered rows vacuum may not remove)
/// and statistics, taken then, that say its rows are in two shards (as
/// after a switch to a fresh partition). The plan kept for a shard read
/// must still go through the shard index: by those statistics a shard is
/// half the partition, and the id index, narrower, looks cheaper for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shards_read_in_a_ring_partition_keeps_to_the_shard_index() {
    let t = database(DbBackend::Postgres, "shard_reads_ring").await;
    OutboxRingMigrator::up(&t.db, None).await.unwrap();
    let pin = t.connect_again(1).await.unwrap();
    pin.execute_unprepared("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .unwrap();
    number(&pin, "SELECT count(*) AS n FROM outbox_shard_state").await;

    // Delivered rows of every shard, then the pending ones: 40 of shard 0
    // (the oldest end finds it deep) and 2 of shard 1 (the newest).
    fill(&t.db, 6_000, &format!("n % {SHARDS}")).await;
    t.db.execute_unprepared("DELETE FROM region_outbox")
        .await
        .unwrap();
    fill(&t.db, 40, "0").await;
    fill(&t.db, 2, "1").await;
    t.db.execute_unprepared("ANALYZE region_outbox")
        .await
        .unwrap();
    let (store, connection) = generic_store(&t).await;
    let costs = read_every_way(&t, &store, &connection, [0, 1, 0, 1]).await;
    check(&costs, 40);

    pin.execute_unprepared("ROLLBACK").await.unwrap();
    pin.close().await.unwrap();
}
