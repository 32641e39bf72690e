//! How many rows a round claims: as many as the receivers, at the speed they
//! have shown, deliver in about a round's duration.
//!
//! A claim leases buckets for as long as its round runs. Fast receivers
//! deliver thousands of messages in a few milliseconds, and big rounds then
//! cost less per message; slow ones would keep a big round's buckets (and
//! every unrelated shard hashed into them) for seconds. So a round claims
//! about `concurrency × round_duration ÷ mean delivery time` rows, between
//! `concurrency` and `batch_size`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::config::DrainConfig;

/// The mean delivery time assumed before any was measured: 1 ms.
const FIRST_GUESS_NANOS: u64 = 1_000_000;

/// An exponentially weighted mean of delivery times, shared by a drainer's
/// clones (lock-free; a lost update only makes it a little less smooth).
#[derive(Debug)]
pub(crate) struct Pace {
    mean_nanos: AtomicU64,
}

impl Default for Pace {
    fn default() -> Self {
        Self {
            mean_nanos: AtomicU64::new(FIRST_GUESS_NANOS),
        }
    }
}

impl Pace {
    /// Folds one delivery time in (weight 1/8).
    pub(crate) fn observe(&self, elapsed: Duration) {
        let sample = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let mean = self.mean_nanos.load(Ordering::Relaxed);
        let next = mean - mean / 8 + sample / 8;
        self.mean_nanos.store(next.max(1), Ordering::Relaxed);
    }

    /// The rows the next round should claim.
    pub(crate) fn rows_per_round(&self, config: &DrainConfig) -> usize {
        let mean = self.mean_nanos.load(Ordering::Relaxed).max(1) as u128;
        let budget = config.round_duration.as_nanos() * config.concurrency as u128;
        let rows = usize::try_from(budget / mean).unwrap_or(usize::MAX);
        rows.clamp(config.concurrency.min(config.batch_size), config.batch_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_receivers_get_full_batches_and_slow_ones_small_rounds() {
        let config = DrainConfig::default();
        let pace = Pace::default();
        assert_eq!(pace.rows_per_round(&config), 1_600, "first guess: 1 ms");
        for _ in 0..200 {
            pace.observe(Duration::from_micros(5));
        }
        assert_eq!(pace.rows_per_round(&config), config.batch_size);
        for _ in 0..200 {
            pace.observe(Duration::from_millis(250));
        }
        assert_eq!(pace.rows_per_round(&config), config.concurrency);
    }
}
