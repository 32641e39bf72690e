//! Deterministic simulation: 10,000 seeded schedules of workers, producers,
//! crashes between store operations, failing, rejecting and panicking
//! receivers, lease expiries and clock jumps, with every rule checked after
//! every step (see `outbox_core::simulation`). A failure prints its seed;
//! `OUTBOX_SIM_SEED=<seed>` replays that one schedule.

#![cfg(feature = "test-utils")]
#![allow(clippy::unwrap_used, missing_docs)]

use outbox_core::simulation::{self, quiet_simulated_panics, SimConfig};

#[test]
fn ten_thousand_schedules_keep_every_rule() {
    quiet_simulated_panics();
    let config = SimConfig::default();
    let replay = std::env::var("OUTBOX_SIM_SEED").ok();
    let seeds: Vec<u64> = match &replay {
        Some(seed) => vec![seed.parse().expect("OUTBOX_SIM_SEED is a number")],
        None => (0..10_000).collect(),
    };
    let (mut deliveries, mut crashes) = (0, 0);
    for seed in seeds {
        match simulation::run(seed, &config) {
            Ok(outcome) => {
                deliveries += outcome.deliveries;
                crashes += outcome.crashes;
            }
            Err(violation) => panic!("{violation}"),
        }
    }
    if replay.is_none() {
        // The schedules do reach the interesting places.
        assert!(deliveries > 100_000, "{deliveries} deliveries");
        assert!(crashes > 5_000, "{crashes} crashes");
    }
}

#[test]
fn a_seed_replays_exactly() {
    quiet_simulated_panics();
    let config = SimConfig::default();
    for seed in [7, 1_234, 99_999] {
        let first = simulation::run(seed, &config).unwrap();
        let again = simulation::run(seed, &config).unwrap();
        assert_eq!(first, again, "seed {seed}");
    }
}
