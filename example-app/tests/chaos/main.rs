//! The chaos suite: the example app as three processes (Control, `us`,
//! `de`) on a PostgreSQL server of its own, under write load over HTTP,
//! while faults hit them: SIGKILL of a silo, crash restarts of the server,
//! storms of `pg_terminate_backend`, sessions idle in transaction holding
//! locks, waves of concurrent requests on small pools, PgBouncer restarts,
//! and SIGSTOP/SIGCONT of one of two processes of a region for longer than
//! the lease (the region's other process must keep creating, each create
//! in under half the lease), and slowloris (hundreds of connections sending
//! a request head a byte at a time: each closed after the header-read
//! timeout, a client served meanwhile with p99 under half that timeout).
//! The bounds are set by the fault's own time scale: a request that waited
//! on the fault would take the lease or the timeout, a loaded machine only
//! slows it. After each scenario's last fault the load stops, and the suite
//! waits until every outbox is empty and every replica equals its source,
//! then checks the ledger of acknowledged writes: nothing lost, nothing
//! stale, nothing duplicated, and convergence within 5 s of the last fault.
//! It prints a table and fails on any violation.
//!
//! `cargo test -p example-app --test chaos` runs the bounded form (about a
//! minute); `-- --ignored chaos_long` the long one. `OUTBOX_CHAOS_SEED`
//! replays a run's choices (which silo is killed, when);
//! `OUTBOX_CHAOS_ONLY=sigkill,waves` runs only the scenarios named (sigkill,
//! crash_restart, terminate, lockers, waves, pgbouncer, pause, slowloris).

#![allow(clippy::unwrap_used, missing_docs)]

mod ledger;
mod load;
mod postgres;
mod scenarios;
mod silos;
mod slowloris;

use scenarios::{Scale, Scenario};

async fn run(scale: Scale) {
    let seed = std::env::var("OUTBOX_CHAOS_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
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
        "chaos suite (OUTBOX_CHAOS_SEED={seed}):\n{}",
        violations.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_bounded() {
    run(Scale::Bounded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the long form (about 2 minutes): cargo test -p example-app --test chaos -- --ignored"]
async fn chaos_long() {
    run(Scale::Long).await;
}
