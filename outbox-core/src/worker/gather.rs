//! Gathering under load: how soon a claim follows a wake-up.
//!
//! A claim costs the database about the same whatever it returns (a
//! statement that reads both ends of the due rows, leases buckets and joins
//! their states: a few hundred microseconds of the server's time). A drain
//! that claims at every wake-up is right when rows come one at a time: each
//! is delivered a claim after its commit. Under a steady write load it is
//! not: measured in the latency bench (`flush = false`, 8 writers, about
//! 3,000 writes/s on two cores), the worker claimed about 6 rows per claim,
//! and the claims took more of the server's time than the outbox rows'
//! inserts.
//!
//! So a claim that took [`GATHER_FROM_SHARDS`] shards or more, the sign that
//! rows come faster than claims, makes the next claim woken by new rows wait
//! until the gather window has passed since it started: what is committed
//! meanwhile goes to one claim. Under light load (a few shards per claim) a
//! claim follows its wake-up at once, so gathering adds no latency where
//! there is little to gather; under load it adds at most the window. The
//! loop leaves gathering by itself once rows come slower than
//! `GATHER_FROM_SHARDS` per window (1,500 a second with the default 4 ms).
//! Six rather than three: from three, a steady 1,000 rows a second kept the
//! worker gathering (about four rows a window), and a row waited 3 ms at
//! the median instead of 1 ms for a quarter of the claims; from six, that
//! rate claims at every wake-up, and the write load of the latency bench
//! (about 3,500 a second) still gathers.
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
