//! Deterministic simulation: 10,000 seeded schedules of workers, producers,
//! crashes between store operations, failing, rejecting and panicking
//! receivers, lease expiries and clock jumps, with every rule checked after
//! every step (see `outbox_testing::simulation`). A failure prints its seed;
//! `OUTBOX_SIM_SEED=<seed>` replays that one schedule.

#![allow(clippy::unwrap_used, missing_docs)]

use outbox_testing::simulation::{self, quiet_simulated_panics, SimConfig};

#[test]
fn ten_thousand_schedules_keep_every_rule() {
    quiet_simulated_panics();
    let config = SimConfig::default();
    let replay = std::env::var("OUTBOX_SIM_SEED").ok();
    let seeds: Vec<u64> = match &replay {
        Some(seed) => vec![seed.parse().expect("OUTBOX_SIM_SEED is a number")],
        None => (0..10_000).collect(),
    };
    let (mut deliveries, mut crashes, mut superseded) = (0, 0, 0);
    for seed in seeds {
        match simulation::run(seed, &config) {
            Ok(outcome) => {
                deliveries += outcome.deliveries;
                crashes += outcome.crashes;
                superseded += outcome.superseded;
            }
            Err(violation) => panic!("{violation}"),
        }
    }
    if replay.is_none() {
        // The schedules do reach the interesting places: stalled workers'
        // late deliveries among them, refused by the fenced receiver.
        assert!(deliveries > 100_000, "{deliveries} deliveries");
        assert!(crashes > 5_000, "{crashes} crashes");
        assert!(superseded > 0, "{superseded} superseded deliveries");
    }
}

/// What fencing prevents: the same schedules with a receiver that applies
/// every delivery find stalled workers putting an old state back (rule 12),
/// and nothing else.
#[test]
fn without_fencing_a_stalled_worker_puts_an_old_state_back() {
    quiet_simulated_panics();
    let config = SimConfig {
        fenced: false,
        ..SimConfig::default()
    };
    let mut stale = 0;
    for seed in 0..10_000 {
        if let Err(violation) = simulation::run(seed, &config) {
            assert_eq!(violation.rule, "12: fencing", "{violation}");
            stale += 1;
        }
    }
    assert!(stale > 0, "no schedule found a stale delivery");
    println!("without fencing: {stale} of 10,000 schedules applied a stale delivery");
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
