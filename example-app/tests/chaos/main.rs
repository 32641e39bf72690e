//! The chaos suite: the example app as three processes (Control, `us`,
//! `de`) on a PostgreSQL server of its own, under write load over HTTP,
//! while faults hit them: SIGKILL of a silo, crash restarts of the server,
//! storms of `pg_terminate_backend`, sessions idle in transaction holding
//! locks, waves of concurrent requests on small pools, PgBouncer restarts,
//! SIGSTOP/SIGCONT of one of two processes of a region for longer than the
//! lease (the region's other process must keep creating meanwhile), and
//! slowloris (hundreds of connections sending a request head a byte at a
//! time: each closed after the header-read timeout, a client served while
//! they are all open). Faults fire on the load's progress (acknowledged
//! writes), never after a sleep, so a loaded machine slows a scenario down
//! without changing it. After each scenario's last fault the load stops,
//! and the suite waits until every outbox is empty and every replica equals
//! its source (within a bound of four times a lease, a delivery timeout and
//! a poll: a recovery's time scale, not a speed), then checks the ledger of
//! acknowledged writes: nothing lost, nothing stale, nothing duplicated. It
//! prints a table and fails on any violation.
//!
//! `cargo test -p example-app --test chaos` runs the bounded form (about two
//! minutes, in the test command); `OUTBOX_CHAOS_SCALE=long` the long one
//! (more and longer faults of each kind). `OUTBOX_CHAOS_SEED` (printed)
//! replays a run's choices (which silo is killed, after how many writes);
//! `OUTBOX_CHAOS_ONLY=sigkill,waves` runs only the scenarios named
//! (sigkill, crash_restart, terminate, lockers, waves, pgbouncer, pause,
//! slowloris).

#![allow(clippy::unwrap_used, missing_docs)]

mod ledger;
mod load;
mod postgres;
mod scenarios;
mod silos;
mod slowloris;

use scenarios::{Scale, Scenario};

/// The bounded form, or the long one with `OUTBOX_CHAOS_SCALE=long`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos() {
    let scale = Scale::from_env();
    let seed = outbox_testing::seed("OUTBOX_CHAOS_SEED");
    let postgres = postgres::Postgres::start().await;
    let mut rows = Vec::new();
    // `OUTBOX_CHAOS_ONLY=sigkill,waves` runs only those.
    let only = std::env::var("OUTBOX_CHAOS_ONLY").unwrap_or_default();
    for scenario in Scenario::ALL {
        if !only.is_empty() && !only.split(',').any(|name| name == scenario.name()) {
            continue;
        }
        rows.push(scenarios::run(scenario, scale, &postgres, seed).await);
    }
    drop(postgres);
    let table = scenarios::table(&rows, scale, seed);
    // Past the test harness's capture: the table is the suite's report.
    {
        use std::io::Write as _;
        let _ = std::io::stderr().write_all(table.as_bytes());
    }
    let violations: Vec<String> = rows.iter().flat_map(|row| row.violations()).collect();
    assert!(
        violations.is_empty(),
        "chaos suite ({scale:?}, OUTBOX_CHAOS_SEED={seed}):\n{}",
        violations.join("\n")
    );
}
