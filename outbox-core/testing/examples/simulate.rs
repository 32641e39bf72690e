//! Runs many seeded schedules of the drain simulation and prints their rate.
//!
//! ```text
//! cargo run --release -p outbox-testing --example simulate -- [schedules] [first seed]
//! ```
//!
//! Defaults: 100,000 schedules from seed 0. Stops at the first broken rule
//! and prints its seed and steps; `outbox_testing::simulation::run(seed, ..)`
//! (or `OUTBOX_SIM_SEED=<seed> cargo test -p outbox-core --test
//! simulation`) replays it.
//!
//! `OUTBOX_SIM_UNFENCED=1` runs the same schedules with a receiver that
//! applies every delivery, whatever its fencing token, and counts the
//! schedules in which a stalled worker put an old state back (rule 12)
//! instead of stopping at the first.

#![allow(missing_docs)]

use std::time::Instant;

use outbox_testing::simulation::{self, SimConfig};

fn main() {
    let mut args = std::env::args().skip(1);
    let schedules: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let first: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    simulation::quiet_simulated_panics();
    let unfenced = std::env::var_os("OUTBOX_SIM_UNFENCED").is_some();
    let config = SimConfig {
        fenced: !unfenced,
        ..SimConfig::default()
    };
    let started = Instant::now();
    let (mut deliveries, mut crashes, mut superseded) = (0usize, 0usize, 0usize);
    let mut stale: Vec<u64> = Vec::new();
    for seed in first..first + schedules {
        match simulation::run(seed, &config) {
            Ok(outcome) => {
                deliveries += outcome.deliveries;
                crashes += outcome.crashes;
                superseded += outcome.superseded;
            }
            Err(violation) if unfenced && violation.rule == "12: fencing" => stale.push(seed),
            Err(violation) => {
                eprintln!("{violation}");
                std::process::exit(1);
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    if unfenced {
        println!(
            "{schedules} schedules without fencing from seed {first}: a stalled worker put an \
             old state back in {} (first seeds: {:?}); {elapsed:.1} s",
            stale.len(),
            &stale[..stale.len().min(5)],
        );
        return;
    }
    println!(
        "{schedules} schedules ({} steps each, {} workers, stalls past the lease included) from \
         seed {first}: every rule held; {deliveries} deliveries, {crashes} worker crashes, \
         {superseded} stale deliveries refused as superseded; {elapsed:.1} s, {:.0} schedules/s",
        config.steps,
        config.workers,
        schedules as f64 / elapsed
    );
}
