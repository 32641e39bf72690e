//! A hot shard never starves cold ones, on PostgreSQL:
//! the commit-to-receiver latency of rows on quiet ("cold") shards while one
//! shard holds a deep backlog, as a ratio to the same rows without it.
//!
//! Run with `cargo bench -p outbox-axum --bench hot_shard`.
//!
//! One process runs an `OutboxWorker` (default configuration, woken by
//! `NOTIFY`) with a no-op receiver. In each run:
//!
//! - *with the hot shard*: 100,000 rows of one shard are inserted by one SQL
//!   statement (distinct objects, so nothing coalesces) and committed with a
//!   `NOTIFY`; right after, 1,000 other shards each receive one row,
//!   committed every 2 ms (never closer: a late tick delays the next ones)
//!   from another connection pool, each with `NOTIFY`, as `latency.rs` does.
//!   One of those 1,000 shards hashes into the hot shard's claim bucket (its
//!   latency is printed apart; the others each have a bucket of their own);
//! - *without* (the baseline): the same 1,000 cold rows, nothing else.
//!
//! Each pair (without, then with) runs on an emptied outbox with a new
//! worker; 3 pairs. It prints, per pair on stderr and as medians in two
//! Markdown tables (as `docs/benchmarks.md` shows them), the cold rows'
//! p50 / p99 / max latency from the instant just before each commit to the
//! receiver, the ratio p99(with) ÷ p99(without) (median of the pairs'
//! ratios), how long the hot shard took to drain (from just before its
//! commit to its last delivery), how many cold rows were committed before it
//! had drained, when the first cold row was delivered (from just before the
//! hot commit; the first cold commit follows it within milliseconds), and
//! whether every row, hot and cold, was delivered exactly
//! once and in id order within its shard (deliveries counted per shard, ids
//! checked to increase, nothing left in the outbox). It exits with status 1
//! if that check fails.
//!
//! - `OUTBOX_BENCH_SLOW_HOT=1`: the hot shard's receiver takes 1 ms per
//!   message (an async sleep, so about 1–2 ms with Tokio's timer), which
//!   changes how many rows a round claims and how long the hot bucket is
//!   held; the 100,000 rows then take minutes to drain.
//! - `OUTBOX_BENCH_HOT_ROWS=n`: the hot shard's backlog (default 100,000).
//!
//! Uses `DATABASE_URL` when set; otherwise starts a throwaway cluster with
//! PostgreSQL's default durability (fsync on) and removes it afterwards.

#![allow(missing_docs, clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_axum::OutboxWorker;
use outbox_core::{HandlerError, Message, OutboxKind, Receivers, ShardKey};
use outbox_seaorm::{listener, write_region, ObjectId, OutboxMessage, ShardId};
use outbox_testing::database::{start_cluster_at, stop_cluster_at, TestDatabase};
use sea_orm::{ConnectionTrait, Statement, TransactionTrait};
use tokio::time::MissedTickBehavior;

use markdown::{ratio, thousands, Table};
use outbox_testing::bench as markdown;

outbox_core::registry! {
    BenchScope = 0 {
        BenchUpdate = 1,
    }
}

const HOT_SHARD: i64 = 0;
const DEFAULT_HOT_ROWS: i64 = 100_000;
const COLD_SHARDS: usize = 1_000;
/// Where, among the cold rows, the row of the shard that shares the hot
/// shard's bucket is committed (early: while the hot shard still drains).
const SHARING_POSITION: usize = 50;
const PACE: Duration = Duration::from_millis(2);
const PAIRS: usize = 3;

/// A delivery: the row id, how many rows it acknowledges, when.
type Delivery = (i64, usize, Instant);

/// The hot shard's deliveries (row id, rows acknowledged), and the instant
/// the last one returned.
#[derive(Default)]
struct Hot {
    rows: Vec<(i64, usize)>,
    last: Option<Instant>,
}

/// What the receiver saw.
#[derive(Default)]
struct Log {
    /// The instant just before each cold row's commit, by row id.
    commits: Mutex<HashMap<i64, Instant>>,
    /// Cold deliveries by shard, in delivery order.
    cold: Mutex<HashMap<i64, Vec<Delivery>>>,
    /// Hot deliveries, in order.
    hot: Mutex<Hot>,
}

/// One run's results.
struct Run {
    /// Cold rows' commit-to-receiver latencies, sorted.
    latencies: Vec<Duration>,
    /// The latency of the cold shard that shares the hot shard's bucket.
    sharing: Duration,
    /// From just before the hot commit to the hot shard's last delivery.
    hot_drain: Option<Duration>,
    /// Cold rows committed before the hot shard's last delivery.
    committed_during_hot: usize,
    /// From just before the hot commit to the first cold delivery.
    first_cold: Option<Duration>,
    /// Problems found by the exactly-once, in-order check.
    problems: Vec<String>,
}

fn bucket(shard: i64) -> i32 {
    ShardKey::region(OutboxScope::BenchScope, shard).bucket()
}

/// The cold shards, in commit order: 1 to 999, each alone in its bucket,
/// and one that shares the hot shard's bucket, committed early.
fn cold_shards() -> Vec<i64> {
    let mut shards: Vec<i64> = (1..COLD_SHARDS as i64).collect();
    let sharing = (COLD_SHARDS as i64..)
        .find(|&shard| bucket(shard) == bucket(HOT_SHARD))
        .unwrap();
    shards.insert(SHARING_POSITION, sharing);
    assert!(shards.iter().all(|&s| s != HOT_SHARD));
    shards
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// One run on an emptied outbox with a new worker: `hot_rows` rows in the
/// hot shard (none for the baseline), then one row per cold shard.
async fn run(
    db: &TestDatabase,
    hot_rows: i64,
    slow_hot: Option<Duration>,
    cold_shards: &[i64],
) -> Run {
    db.db
        .execute_unprepared("TRUNCATE region_outbox, outbox_claim_bucket, outbox_shard_state")
        .await
        .unwrap();
    let log = Arc::new(Log::default());
    let receivers = Receivers::new().on(OutboxCategory::BenchUpdate, {
        let log = log.clone();
        move |message: Message<OutboxCategory>| {
            let received = Instant::now();
            let log = log.clone();
            let shard = message.shard.identifier();
            let hot = shard == HOT_SHARD;
            if !hot {
                log.cold.lock().unwrap().entry(shard).or_default().push((
                    message.id,
                    message.coalesced,
                    received,
                ));
            }
            async move {
                if hot {
                    if let Some(delay) = slow_hot {
                        tokio::time::sleep(delay).await;
                    }
                    let mut hot = log.hot.lock().unwrap();
                    hot.rows.push((message.id, message.coalesced));
                    hot.last = Some(Instant::now());
                }
                Ok::<_, HandlerError>(())
            }
        }
    });
    let worker = OutboxWorker::builder(db.db.clone(), receivers)
        .kinds([OutboxKind::Region])
        .spawn()
        .await
        .unwrap();
    worker.ready().await;
    let writer = db.connect_again(2).await.unwrap();

    let mut hot_committed = None;
    if hot_rows > 0 {
        let txn = writer.begin().await.unwrap();
        txn.execute_raw(Statement::from_sql_and_values(
            txn.get_database_backend(),
            "INSERT INTO region_outbox (shard_scope, shard_identifier, category, \
             object_identifier, payload, message_id)
             SELECT 0, $1, 1, n, jsonb_build_object('n', n, 'name', 'some payload of a realistic size'),
                    gen_random_uuid()
             FROM generate_series(1, $2) n",
            [HOT_SHARD.into(), hot_rows.into()],
        ))
        .await
        .unwrap();
        listener::notify(&txn, OutboxKind::Region).await.unwrap();
        hot_committed = Some(Instant::now());
        txn.commit().await.unwrap();
    }

    let mut written: HashMap<i64, i64> = HashMap::new();
    let mut pace = tokio::time::interval(PACE);
    // A commit that takes longer than the pace delays the next ones rather
    // than letting them follow back to back.
    pace.set_missed_tick_behavior(MissedTickBehavior::Delay);
    for &shard in cold_shards {
        pace.tick().await;
        let txn = writer.begin().await.unwrap();
        let row = write_region(
            &txn,
            OutboxMessage::new(OutboxCategory::BenchUpdate, ShardId(shard), ObjectId(shard)),
        )
        .await
        .unwrap();
        listener::notify(&txn, OutboxKind::Region).await.unwrap();
        // Recorded just before the commit so the receiver always finds it;
        // the commit's own time is part of the latency.
        log.commits.lock().unwrap().insert(row.id, Instant::now());
        txn.commit().await.unwrap();
        written.insert(shard, row.id);
    }

    // Until everything is delivered, within a generous bound.
    let per_hot_row = slow_hot.unwrap_or_default() * 2 + Duration::from_micros(100);
    let deadline =
        Instant::now() + Duration::from_secs(120) + per_hot_row * u32::try_from(hot_rows).unwrap();
    loop {
        let cold_done = log.cold.lock().unwrap().len() == cold_shards.len();
        let hot_done = log.hot.lock().unwrap().rows.len() >= hot_rows as usize;
        if (cold_done && hot_done) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A little longer, for a delivery that would come twice.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pending = worker
        .drainer()
        .view()
        .pending_count(OutboxKind::Region)
        .await
        .unwrap();
    worker.shutdown().await;
    writer.close().await.unwrap();

    let mut problems = Vec::new();
    if pending != 0 {
        problems.push(format!("{pending} rows left in the outbox"));
    }
    let Hot {
        rows: hot,
        last: hot_last,
    } = std::mem::take(&mut *log.hot.lock().unwrap());
    if hot.len() != hot_rows as usize {
        problems.push(format!(
            "hot shard: {} deliveries for {hot_rows} rows",
            hot.len()
        ));
    }
    if let Some(coalesced) = hot.iter().find(|(_, rows)| *rows != 1) {
        problems.push(format!(
            "hot shard: row {} acknowledged {} rows",
            coalesced.0, coalesced.1
        ));
    }
    if let Some(pair) = hot.windows(2).find(|pair| pair[1].0 <= pair[0].0) {
        problems.push(format!(
            "hot shard: row {} delivered after row {}",
            pair[1].0, pair[0].0
        ));
    }
    let cold = std::mem::take(&mut *log.cold.lock().unwrap());
    let commits = std::mem::take(&mut *log.commits.lock().unwrap());
    let mut latencies = Vec::with_capacity(cold_shards.len());
    let sharing_shard = cold_shards[SHARING_POSITION];
    let mut sharing = Duration::ZERO;
    let mut first_received: Option<Instant> = None;
    for &shard in cold_shards {
        let id = written[&shard];
        match cold.get(&shard).map(Vec::as_slice) {
            Some(&[(delivered, 1, received)]) if delivered == id => {
                let latency = received.saturating_duration_since(commits[&id]);
                latencies.push(latency);
                first_received = Some(first_received.map_or(received, |first| first.min(received)));
                if shard == sharing_shard {
                    sharing = latency;
                }
            }
            other => problems.push(format!(
                "cold shard {shard}: row {id} written, delivered {:?}",
                other.map(|d| d
                    .iter()
                    .map(|(id, rows, _)| (*id, *rows))
                    .collect::<Vec<_>>())
            )),
        }
    }
    if cold.len() != cold_shards.len() {
        problems.push(format!(
            "{} shards delivered, {} cold shards written",
            cold.len(),
            cold_shards.len()
        ));
    }
    latencies.sort();
    if latencies.is_empty() {
        latencies.push(Duration::MAX);
    }
    let hot_drain = hot_committed.zip(hot_last).map(|(from, to)| to - from);
    let committed_during_hot = hot_last.map_or(0, |last| {
        commits.values().filter(|&&commit| commit < last).count()
    });
    Run {
        latencies,
        sharing,
        hot_drain,
        committed_during_hot,
        first_cold: hot_committed
            .zip(first_received)
            .map(|(from, to)| to.saturating_duration_since(from)),
        problems,
    }
}

fn summary(run: &Run) -> String {
    format!(
        "p50 {:>7.2} ms  p99 {:>8.2} ms  max {:>8.2} ms",
        ms(percentile(&run.latencies, 0.50)),
        ms(percentile(&run.latencies, 0.99)),
        ms(*run.latencies.last().unwrap()),
    )
}

#[tokio::main]
async fn main() {
    let slow_hot = env_flag("OUTBOX_BENCH_SLOW_HOT").then_some(Duration::from_millis(1));
    let hot_rows = std::env::var("OUTBOX_BENCH_HOT_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_HOT_ROWS);
    let cold = cold_shards();

    let own_cluster = std::env::var("DATABASE_URL").is_err();
    let dir = std::env::temp_dir().join(format!("outbox-bench-hot-{}", std::process::id()));
    let admin = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => start_cluster_at(&dir, true).unwrap(),
    };
    let db = TestDatabase::postgres_on(&admin, "bench_hot_shard")
        .await
        .unwrap();

    eprintln!(
        "PostgreSQL, one OutboxWorker (NOTIFY, default config): {} cold shards get one row \
         each, committed every {} ms from another pool, with NOTIFY; with a hot shard of {hot_rows} \
         rows committed right before them ({} hot receiver), and without it; cold shard {} \
         shares the hot shard's claim bucket",
        cold.len(),
        PACE.as_millis(),
        if slow_hot.is_some() {
            "1 ms per message"
        } else {
            "no-op"
        },
        cold[SHARING_POSITION],
    );
    let mut pairs = Vec::new();
    for pair in 1..=PAIRS {
        let without = run(&db, 0, slow_hot, &cold).await;
        let with = run(&db, hot_rows, slow_hot, &cold).await;
        eprintln!(
            "  pair {pair}: without the hot shard: {}",
            summary(&without)
        );
        eprintln!("          with the hot shard:    {}", summary(&with));
        let drain = with.hot_drain.unwrap_or_default();
        eprintln!(
            "          hot shard drained in {:.2} s ({:.0} rows/s); {} cold rows committed \
             before that; the first cold delivery {:.2} s after the hot commit; cold shard {}: \
             {:.2} ms (without: {:.2} ms)",
            drain.as_secs_f64(),
            hot_rows as f64 / drain.as_secs_f64(),
            with.committed_during_hot,
            with.first_cold.unwrap_or_default().as_secs_f64(),
            cold[SHARING_POSITION],
            ms(with.sharing),
            ms(without.sharing),
        );
        for problem in without.problems.iter().chain(&with.problems) {
            eprintln!("          DELIVERY PROBLEM: {problem}");
        }
        pairs.push((without, with));
    }

    let med = |f: &dyn Fn(&(Run, Run)) -> f64| median(&mut pairs.iter().map(f).collect::<Vec<_>>());
    let p = |run: &Run, q: f64| ms(percentile(&run.latencies, q));
    let mut cold_rows = Table::new(&["cold rows, commit → receiver", "p50", "p99"]);
    cold_rows.row([
        "without the hot shard".to_owned(),
        format!("{:.2} ms", med(&|(w, _)| p(w, 0.50))),
        format!("{:.2} ms", med(&|(w, _)| p(w, 0.99))),
    ]);
    cold_rows.row([
        format!(
            "with the {}-row hot shard being drained",
            thousands(hot_rows as f64)
        ),
        format!("{:.2} ms", med(&|(_, h)| p(h, 0.50))),
        format!("{:.2} ms", med(&|(_, h)| p(h, 0.99))),
    ]);
    cold_rows.row([
        "ratio (median of the pairs' ratios)".to_owned(),
        ratio(med(&|(w, h)| p(h, 0.50) / p(w, 0.50))),
        ratio(med(&|(w, h)| p(h, 0.99) / p(w, 0.99))),
    ]);
    let drain = med(&|(_, h)| h.hot_drain.unwrap_or_default().as_secs_f64());
    let problems: usize = pairs
        .iter()
        .map(|(w, h)| w.problems.len() + h.problems.len())
        .sum();
    let mut hot = Table::new(&["the hot shard's runs (medians of the pairs)", ""]);
    hot.row([
        "hot shard drained in".to_owned(),
        format!(
            "{drain:.2} s ({} rows/s)",
            thousands(hot_rows as f64 / drain)
        ),
    ]);
    hot.row([
        "cold rows committed before it had drained".to_owned(),
        thousands(med(&|(_, h)| h.committed_during_hot as f64)),
    ]);
    hot.row([
        "first cold delivery after the hot commit".to_owned(),
        format!(
            "{:.2} s",
            med(&|(_, h)| h.first_cold.unwrap_or_default().as_secs_f64())
        ),
    ]);
    hot.row([
        "the cold shard in the hot shard's claim bucket, with / without".to_owned(),
        format!(
            "{:.2} / {:.2} ms",
            med(&|(_, h)| ms(h.sharing)),
            med(&|(w, _)| ms(w.sharing)),
        ),
    ]);
    hot.row([
        "every row delivered once, in id order per shard".to_owned(),
        if problems == 0 {
            "yes".to_owned()
        } else {
            format!("no ({problems} problems on stderr)")
        },
    ]);
    print!("{cold_rows}\n{hot}");

    db.db.clone().close().await.unwrap();
    // Dropped (the database with it) before the server stops.
    drop(db);
    if own_cluster {
        stop_cluster_at(&dir).unwrap();
    }
    if problems > 0 {
        std::process::exit(1);
    }
}
