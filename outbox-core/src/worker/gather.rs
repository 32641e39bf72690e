//! Gathering under load: how soon a claim follows a wake-up.
//!
//! A claim costs the database about the same whatever it returns (a
//! statement that reads both ends of the due rows, leases buckets and joins
//! their states). A drain that claims at every wake-up is right when rows
//! come one at a time: each is delivered a claim after its commit. Under a
//! steady write load it is not: each claim then takes a handful of rows,
//! and the claims take more of the server's time than the outbox rows'
//! inserts (measured: `cargo bench -p outbox-axum --bench latency`,
//! `flush = false`; see `docs/benchmarks.md`).
//!
//! So a claim that took [`GATHER_FROM_SHARDS`] shards or more, the sign that
//! rows come faster than claims, makes the next claim woken by new rows wait
//! until the gather window has passed since it started: what is committed
//! meanwhile goes to one claim. Under light load (a few shards per claim) a
//! claim follows its wake-up at once, so gathering adds no latency where
//! there is little to gather; under load it adds at most the window. The
//! loop leaves gathering by itself once fewer than `GATHER_FROM_SHARDS`
//! shards' rows come per window.
//! The threshold is high enough that a moderate steady rate still claims
//! at every wake-up (below it, such a rate keeps the worker gathering and
//! each of its rows waits for the window), and low enough that a write
//! load gathers (measured by the same bench, with the NOTIFY path at a
//! steady rate).
//! Claims that follow a claim which left rows due (a backlog) never wait.

use std::time::Duration;

use tokio::time::Instant;

/// The shards a claim takes from which the next one gathers: 6.
pub const GATHER_FROM_SHARDS: usize = 6;

/// When the claim after one that started at `started` and took `shards` may
/// start, if it was woken by new rows: `None` when at once.
pub(super) fn next_claim(started: Instant, shards: usize, window: Duration) -> Option<Instant> {
    (shards >= GATHER_FROM_SHARDS && !window.is_zero()).then(|| started + window)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_gathers_only_after_one_that_took_several_shards() {
        let started = Instant::now();
        let window = Duration::from_millis(4);
        assert_eq!(next_claim(started, 0, window), None, "nothing was due");
        assert_eq!(next_claim(started, 1, window), None, "one row at a time");
        assert_eq!(next_claim(started, GATHER_FROM_SHARDS - 1, window), None);
        assert_eq!(
            next_claim(started, GATHER_FROM_SHARDS, window),
            Some(started + window)
        );
        assert_eq!(next_claim(started, 500, Duration::ZERO), None, "turned off");
    }
}
