//! Runs many seeded schedules of the drain simulation and prints their rate.
//!
//! ```text
//! cargo run --release -p outbox-core --features test-utils --example simulate -- [schedules] [first seed]
//! ```
//!
//! Defaults: 100,000 schedules from seed 0. Stops at the first broken rule
//! and prints its seed and steps; `outbox_core::simulation::run(seed, ..)`
//! (or `OUTBOX_SIM_SEED=<seed> cargo test -p outbox-core --features
//! test-utils --test simulation`) replays it.

#![allow(missing_docs)]

use std::time::Instant;

use outbox_core::simulation::{self, SimConfig};

fn main() {
    let mut args = std::env::args().skip(1);
    let schedules: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let first: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    simulation::quiet_simulated_panics();
    let config = SimConfig::default();
    let started = Instant::now();
    let (mut deliveries, mut crashes) = (0usize, 0usize);
    for seed in first..first + schedules {
        match simulation::run(seed, &config) {
            Ok(outcome) => {
                deliveries += outcome.deliveries;
                crashes += outcome.crashes;
            }
            Err(violation) => {
                eprintln!("{violation}");
                std::process::exit(1);
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "{schedules} schedules ({} steps each, {} workers) from seed {first}: every rule held; \
         {deliveries} deliveries, {crashes} worker crashes; {:.1} s, {:.0} schedules/s",
        config.steps,
        config.workers,
        elapsed,
        schedules as f64 / elapsed
    );
}
