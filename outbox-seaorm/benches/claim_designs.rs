//! Three ways to make a shard exclusive, measured side by side in one run:
//! the record of why the drain claims *buckets* of shards.
//!
//! Run with `cargo bench -p outbox-seaorm --bench claim_designs`.
//!
//! Each design drains the same pre-filled outbox table (a no-op "delivery"
//! between claim and commit, no drain engine), through the same driver,
//! against a throwaway PostgreSQL cluster with default durability (or
//! `DATABASE_URL`):
//!
//! - **floor**: `DELETE … WHERE id IN (SELECT … LIMIT 500 FOR UPDATE SKIP
//!   LOCKED) RETURNING` in a loop (no exclusivity per shard at all);
//! - **shard rows**: one claim row per shard, inserted with `INSERT … ON
//!   CONFLICT DO UPDATE … WHERE lease expired`, read with `LATERAL`, deleted
//!   with the rows (the design before buckets);
//! - **buckets** (the design kept, through the shipped `PgStore` statements):
//!   shards hashed into 1,024 buckets; a claim leases the free buckets of the
//!   oldest due rows (at most 512) with one `UPDATE` of existing rows (HOT,
//!   unlogged), reads those rows in the same statement, and the commit
//!   releases the buckets in the statement that deletes the rows;
//! - **advisory locks**: `pg_try_advisory_lock` per shard on a dedicated
//!   connection (no table writes); rows read and deleted on that connection
//!   after the lock (a read in the locking statement would use a snapshot
//!   older than the lock), then `pg_advisory_unlock_all`.
//!
//! Scenarios: (a) 20,000 shards × 1 message, one and two workers; (b) 100
//! shards × 200 messages. Figures are the median of three runs, as msgs/s and
//! as a ratio to the floor measured right before. It prints a Markdown table
//! of the ratios, with the floor's msgs/s, as `docs/benchmarks.md` shows it
//! (each scenario's rates also go to stderr as it ends).

#![allow(missing_docs, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use outbox_core::drain::DEFAULT_BATCH_SIZE;
use outbox_core::shard::{CLAIM_BUCKETS, MAX_BUCKETS_PER_CLAIM};
use outbox_core::store::{ClaimRequest, CommitBatch, DrainStore, ShardCommit, ShardEnd};
use outbox_core::OutboxKind;
use outbox_seaorm::store::PgStore;
use outbox_testing::database::{connect, start_cluster_at, stop_cluster_at, TestDatabase};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, QueryResult, Statement, Value};

use markdown::{ratio, thousands, Table};
use outbox_testing::bench as markdown;

const MESSAGES: i64 = 20_000;
/// Shards per claim of the shard-row and advisory designs (as the drain
/// claimed before buckets).
const SHARDS_PER_CLAIM: i64 = 512;

/// The shard-row design's claim table (the outbox tables and the bucket
/// table come from the outbox migrations).
const SCHEMA: &str = "
CREATE UNLOGGED TABLE claim_shard_row (
    shard_scope integer NOT NULL,
    shard_identifier bigint NOT NULL,
    token bigint NOT NULL,
    owner text NULL,
    lease_until timestamptz NOT NULL,
    PRIMARY KEY (shard_scope, shard_identifier)
);
CREATE INDEX claim_shard_row_token ON claim_shard_row (token);
";

// ---------------------------------------------------------------- shard rows

const SHARD_ROWS_CLAIM: &str = "
WITH candidates AS (
    SELECT o.shard_scope, o.shard_identifier, o.scheduled_for, o.id
    FROM region_outbox o
    WHERE o.scheduled_for <= $1
      AND NOT EXISTS (
        SELECT 1 FROM claim_shard_row c
        WHERE c.shard_scope = o.shard_scope AND c.shard_identifier = o.shard_identifier
          AND c.lease_until > $1)
    ORDER BY o.scheduled_for, o.id
    LIMIT $2
), free AS (
    SELECT shard_scope, shard_identifier, min(scheduled_for) AS first_due, min(id) AS first_id
    FROM candidates GROUP BY shard_scope, shard_identifier
    ORDER BY first_due, first_id LIMIT $3
)
INSERT INTO claim_shard_row AS c (shard_scope, shard_identifier, token, owner, lease_until)
SELECT f.shard_scope, f.shard_identifier, $4, 'bench', $5 FROM free f
ORDER BY f.shard_scope, f.shard_identifier
ON CONFLICT (shard_scope, shard_identifier) DO UPDATE
    SET token = EXCLUDED.token, owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until
    WHERE c.lease_until <= $1
RETURNING shard_scope, shard_identifier";

const SHARD_READ: &str = "
SELECT o.id, o.shard_scope, o.shard_identifier, o.category, o.object_identifier, o.payload,
       o.scheduled_from, o.scheduled_for, o.date_added
FROM unnest($1::int[], $2::bigint[]) AS s(shard_scope, shard_identifier)
CROSS JOIN LATERAL (
    SELECT * FROM region_outbox o
    WHERE o.shard_scope = s.shard_scope AND o.shard_identifier = s.shard_identifier
    ORDER BY o.id LIMIT 500
) o";

const SHARD_ROWS_COMMIT: &str = "
WITH relaxed AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
), mine AS (
    SELECT ctid FROM claim_shard_row
    WHERE token = $1 AND lease_until > $2
    ORDER BY shard_scope, shard_identifier FOR UPDATE
), owned AS (
    DELETE FROM claim_shard_row c WHERE c.ctid = ANY(ARRAY(SELECT ctid FROM mine))
    RETURNING c.shard_scope, c.shard_identifier
), deleted AS (
    DELETE FROM region_outbox o WHERE o.id = ANY($3::bigint[])
      AND EXISTS (SELECT 1 FROM owned w
                  WHERE w.shard_scope = o.shard_scope AND w.shard_identifier = o.shard_identifier)
    RETURNING 1
)
SELECT (SELECT count(*) FROM deleted) AS deleted, (SELECT setting FROM relaxed) AS s";

// ------------------------------------------------------------ advisory locks

const ADVISORY_LOCK: &str = "
WITH cand AS MATERIALIZED (
    SELECT DISTINCT shard_scope, shard_identifier FROM (
        SELECT o.shard_scope, o.shard_identifier FROM region_outbox o
        WHERE o.scheduled_for <= $1 ORDER BY o.scheduled_for, o.id LIMIT $2
    ) due
)
SELECT shard_scope, shard_identifier FROM cand
WHERE pg_try_advisory_lock(shard_scope, shard_identifier::int)";

const ADVISORY_DELETE: &str = "
WITH relaxed AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
), deleted AS (
    DELETE FROM region_outbox o WHERE o.id = ANY($1::bigint[]) RETURNING 1
)
SELECT (SELECT count(*) FROM deleted) AS deleted, (SELECT setting FROM relaxed) AS s";

// --------------------------------------------------------------------- runs

fn stmt(sql: &str, values: Vec<Value>) -> Statement {
    Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
}

async fn fill(db: &DatabaseConnection, shards: i64) {
    db.execute_unprepared(
        "TRUNCATE region_outbox, claim_shard_row, outbox_claim_bucket, outbox_shard_state",
    )
    .await
    .unwrap();
    db.execute_raw(stmt(
        "INSERT INTO region_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
         SELECT 0, n % $1, 1, n, jsonb_build_object('n', n, 'name', 'some payload of a realistic size')
         FROM generate_series(0, $2 - 1) n",
        vec![shards.into(), MESSAGES.into()],
    ))
    .await
    .unwrap();
    for table in ["region_outbox", "claim_shard_row", "outbox_claim_bucket"] {
        db.execute_unprepared(&format!("VACUUM ANALYZE {table}"))
            .await
            .unwrap();
    }
}

fn ids(rows: &[QueryResult]) -> Vec<i64> {
    rows.iter().map(|r| r.try_get("", "id").unwrap()).collect()
}

fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

fn lease() -> chrono::DateTime<chrono::Utc> {
    now() + chrono::Duration::seconds(30)
}

async fn floor(db: &DatabaseConnection) -> u64 {
    let sql = "DELETE FROM region_outbox WHERE id IN (SELECT id FROM region_outbox ORDER BY id \
               LIMIT 500 FOR UPDATE SKIP LOCKED) RETURNING id, shard_scope, shard_identifier, \
               category, object_identifier, payload";
    let mut deleted = 0;
    loop {
        let rows = db.query_all_raw(stmt(sql, vec![])).await.unwrap();
        if rows.is_empty() {
            return deleted;
        }
        deleted += rows.len() as u64;
    }
}

/// One worker of the shard-row design: claim, read, commit until idle.
async fn shard_rows(db: DatabaseConnection) -> u64 {
    let mut deleted = 0;
    loop {
        let token: i64 = rand::random::<i64>() & i64::MAX;
        let claimed = db
            .query_all_raw(stmt(
                SHARD_ROWS_CLAIM,
                vec![
                    now().into(),
                    (SHARDS_PER_CLAIM * 4).into(),
                    SHARDS_PER_CLAIM.into(),
                    token.into(),
                    lease().into(),
                ],
            ))
            .await
            .unwrap();
        if claimed.is_empty() {
            return deleted;
        }
        let scopes: Vec<i32> = claimed
            .iter()
            .map(|r| r.try_get("", "shard_scope").unwrap())
            .collect();
        let identifiers: Vec<i64> = claimed
            .iter()
            .map(|r| r.try_get("", "shard_identifier").unwrap())
            .collect();
        let rows = db
            .query_all_raw(stmt(SHARD_READ, vec![scopes.into(), identifiers.into()]))
            .await
            .unwrap();
        let done = db
            .query_one_raw(stmt(
                SHARD_ROWS_COMMIT,
                vec![token.into(), now().into(), ids(&rows).into()],
            ))
            .await
            .unwrap()
            .unwrap();
        deleted += done.try_get::<i64>("", "deleted").unwrap() as u64;
    }
}

/// One worker of the bucket design, through the shipped PostgreSQL store's
/// statements (`claim_due_oldest.sql`, `commit_finished.sql`): claim+read, commit
/// until idle.
async fn buckets(db: DatabaseConnection, rows_per_claim: usize) -> u64 {
    let store = PgStore::new(db).unwrap();
    let mut deleted = 0;
    loop {
        let token: i64 = rand::random::<i64>() & i64::MAX;
        let now = now();
        let request = ClaimRequest {
            kind: OutboxKind::Region,
            now,
            lease_until: lease(),
            token,
            owner: "bench".to_owned(),
            rows: rows_per_claim,
            up_to_id: None,
            order: outbox_core::store::ClaimOrder::Oldest,
            beyond: 0,
            shard_rows: usize::MAX,
            held_rows: 0,
        };
        let claimed = store.claim_due(&request).await.unwrap().shards;
        if claimed.is_empty() {
            return deleted;
        }
        let shards = claimed
            .into_iter()
            .map(|claimed| ShardCommit {
                delete_ids: claimed.rows.iter().map(|row| row.id).collect(),
                shard: claimed.shard,
                dead_letters: Vec::new(),
                end: ShardEnd::Done,
            })
            .collect();
        let outcome = store
            .commit(&CommitBatch {
                kind: OutboxKind::Region,
                token,
                now: self::now(),
                shards,
                in_flight: Vec::new(),
                renew_until: now,
            })
            .await
            .unwrap();
        deleted += outcome.deleted;
    }
}

/// One worker of the advisory-lock design, on its own dedicated connection:
/// lock, read, delete, unlock until idle.
async fn advisory(url: String) -> u64 {
    let session = connect(&url, 1).await.unwrap();
    let mut deleted = 0;
    loop {
        let locked = session
            .query_all_raw(stmt(
                ADVISORY_LOCK,
                vec![now().into(), (SHARDS_PER_CLAIM * 4).into()],
            ))
            .await
            .unwrap();
        if locked.is_empty() {
            session.close().await.unwrap();
            return deleted;
        }
        let scopes: Vec<i32> = locked
            .iter()
            .map(|r| r.try_get("", "shard_scope").unwrap())
            .collect();
        let identifiers: Vec<i64> = locked
            .iter()
            .map(|r| r.try_get("", "shard_identifier").unwrap())
            .collect();
        let rows = session
            .query_all_raw(stmt(SHARD_READ, vec![scopes.into(), identifiers.into()]))
            .await
            .unwrap();
        let done = session
            .query_one_raw(stmt(ADVISORY_DELETE, vec![ids(&rows).into()]))
            .await
            .unwrap()
            .unwrap();
        deleted += done.try_get::<i64>("", "deleted").unwrap() as u64;
        session
            .execute_unprepared("SELECT pg_advisory_unlock_all()")
            .await
            .unwrap();
    }
}

#[derive(Clone, Copy, Debug)]
enum Design {
    ShardRows,
    Buckets,
    Advisory,
}

impl Design {
    fn label(self) -> String {
        match self {
            Design::ShardRows => "a claim row per shard".to_owned(),
            Design::Buckets => format!(
                "buckets ({}; at most {MAX_BUCKETS_PER_CLAIM} per claim)",
                thousands(CLAIM_BUCKETS as f64)
            ),
            Design::Advisory => "advisory locks on a dedicated connection".to_owned(),
        }
    }
}

async fn run(database: &TestDatabase, design: Design, workers: usize) -> Duration {
    let mut pools = Vec::new();
    for _ in 0..workers {
        pools.push(database.connect_again(1).await.unwrap());
    }
    let started = Instant::now();
    let tasks: Vec<_> = pools
        .iter()
        .map(|db| {
            let db = db.clone();
            let url = database.url.clone();
            tokio::spawn(async move {
                match design {
                    Design::ShardRows => shard_rows(db).await,
                    Design::Buckets => buckets(db, DEFAULT_BATCH_SIZE).await,
                    Design::Advisory => advisory(url).await,
                }
            })
        })
        .collect();
    let mut deleted = 0;
    for task in tasks {
        deleted += task.await.unwrap();
    }
    let elapsed = started.elapsed();
    assert_eq!(deleted, MESSAGES as u64, "{design:?} left rows behind");
    for pool in pools {
        pool.close().await.unwrap();
    }
    elapsed
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main]
async fn main() {
    let own_cluster = std::env::var("DATABASE_URL").is_err();
    let dir = std::env::temp_dir().join(format!("outbox-bench-claims-{}", std::process::id()));
    let admin = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => start_cluster_at(&dir, true).unwrap(),
    };
    let database = TestDatabase::postgres_on(&admin, "claim_designs")
        .await
        .unwrap();
    let db = &database.db;
    db.execute_unprepared(SCHEMA).await.unwrap();

    let designs = [Design::ShardRows, Design::Buckets, Design::Advisory];
    let scenarios: [(&str, i64, usize); 3] = [
        ("(a) 20,000 shards × 1", MESSAGES, 1),
        ("(a') the same, 2 workers", MESSAGES, 2),
        ("(b) 100 shards × 200", 100, 1),
    ];
    const REPEATS: usize = 3;
    // Per scenario: the floor's msgs/s, then each design's ratio to it.
    let mut columns: Vec<Vec<String>> = Vec::new();
    eprintln!(
        "Claim designs on PostgreSQL: {MESSAGES} pre-filled messages, no-op delivery, \
         median of {REPEATS} runs, msgs/s and ratio to the floor measured alongside"
    );
    for (label, shards, workers) in scenarios {
        let mut floors = Vec::new();
        let mut rates = vec![Vec::new(); designs.len()];
        for _ in 0..REPEATS {
            for (i, design) in designs.iter().enumerate() {
                fill(db, MESSAGES).await;
                let started = Instant::now();
                assert_eq!(floor(db).await, MESSAGES as u64);
                floors.push(MESSAGES as f64 / started.elapsed().as_secs_f64());
                fill(db, shards).await;
                let elapsed = run(&database, *design, workers).await;
                rates[i].push(MESSAGES as f64 / elapsed.as_secs_f64());
            }
        }
        let floor = median(&mut floors);
        eprintln!("{label}: floor {floor:>7.0} msgs/s");
        let mut column = vec![thousands(floor)];
        for (i, design) in designs.iter().enumerate() {
            let rate = median(&mut rates[i]);
            eprintln!(
                "  {:<40} {rate:>7.0} msgs/s  {:.2}x floor",
                design.label(),
                rate / floor
            );
            column.push(ratio(rate / floor));
        }
        columns.push(column);
    }
    let mut header = vec!["design"];
    header.extend(scenarios.iter().map(|(label, _, _)| *label));
    let mut table = Table::new(&header);
    let labels = std::iter::once("floor, msgs/s".to_owned()).chain(designs.map(Design::label));
    for (at, label) in labels.enumerate() {
        table.row(std::iter::once(label).chain(columns.iter().map(|column| column[at].clone())));
    }
    print!("{table}");
    db.clone().close().await.unwrap();
    if own_cluster {
        stop_cluster_at(&dir).unwrap();
    }
}
