use std::time::Duration;

use crate::backoff::BackoffPolicy;

/// Default rows read per shard per round: 500.
pub const DEFAULT_BATCH_SIZE: usize = 500;
/// Default shards claimed per background round: 512.
pub const DEFAULT_SHARDS_PER_CLAIM: usize = 512;
/// Default shards delivered at once within a round: 16.
pub const DEFAULT_CONCURRENCY: usize = 16;
/// Default claim lease: 30 s.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Default time a receiver may take for one message: 10 s.
pub const DEFAULT_DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// Default rows a claim works through before yielding its shard: 10,000.
pub const DEFAULT_MAX_ROWS_PER_CLAIM: usize = 10_000;
/// Default ids per delete statement: 1,000.
pub const DEFAULT_DELETE_CHUNK: usize = 1_000;
/// Default time a synchronous flush waits for a shard held elsewhere: 5 s.
pub const DEFAULT_SYNC_WAIT: Duration = Duration::from_secs(5);

/// Tuning of a [`Drainer`](super::Drainer). Every setter states its default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainConfig {
    pub(crate) batch_size: usize,
    pub(crate) shards_per_claim: usize,
    pub(crate) concurrency: usize,
    pub(crate) lease: Duration,
    pub(crate) delivery_timeout: Duration,
    pub(crate) max_rows_per_claim: usize,
    pub(crate) delete_chunk: usize,
    pub(crate) sync_wait: Duration,
    pub(crate) backoff: BackoffPolicy,
}

impl Default for DrainConfig {
    fn default() -> Self {
        Self {
            batch_size: DEFAULT_BATCH_SIZE,
            shards_per_claim: DEFAULT_SHARDS_PER_CLAIM,
            concurrency: DEFAULT_CONCURRENCY,
            lease: DEFAULT_LEASE,
            delivery_timeout: DEFAULT_DELIVERY_TIMEOUT,
            max_rows_per_claim: DEFAULT_MAX_ROWS_PER_CLAIM,
            delete_chunk: DEFAULT_DELETE_CHUNK,
            sync_wait: DEFAULT_SYNC_WAIT,
            backoff: BackoffPolicy::default(),
        }
    }
}

impl DrainConfig {
    /// Rows read per shard per round (at least 1). Default: 500.
    pub fn batch_size(mut self, rows: usize) -> Self {
        self.batch_size = rows.max(1);
        self
    }

    /// Shards claimed per background round (at least 1). Default: 512.
    pub fn shards_per_claim(mut self, shards: usize) -> Self {
        self.shards_per_claim = shards.max(1);
        self
    }

    /// Shards delivered at once within a round (at least 1). Default: 16.
    pub fn concurrency(mut self, shards: usize) -> Self {
        self.concurrency = shards.max(1);
        self
    }

    /// How long a claim holds a shard without renewal; a crashed worker's
    /// shards are taken over after this. Default: 30 s.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(10));
        self
    }

    /// How long one receiver call may take before it counts as failed. The
    /// effective timeout is at most a third of the lease, so that a delivery
    /// always ends while its claim still holds. Default: 10 s.
    pub fn delivery_timeout(mut self, timeout: Duration) -> Self {
        self.delivery_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Rows one claim works through before it yields the shard to others
    /// (at least `batch_size`). Default: 10,000.
    pub fn max_rows_per_claim(mut self, rows: usize) -> Self {
        self.max_rows_per_claim = rows.max(1);
        self
    }

    /// Ids per delete statement (bounded deletes; at least 1). Default: 1,000.
    pub fn delete_chunk(mut self, ids: usize) -> Self {
        self.delete_chunk = ids.max(1);
        self
    }

    /// How long a synchronous flush waits for a shard that another worker
    /// holds before it leaves the rows to the background drain. Default: 5 s.
    pub fn sync_wait(mut self, wait: Duration) -> Self {
        self.sync_wait = wait;
        self
    }

    /// Backoff of failing shards. Default: 1 s doubling to 1 h.
    pub fn backoff(mut self, backoff: BackoffPolicy) -> Self {
        self.backoff = backoff;
        self
    }

    /// The lease of a claim.
    pub fn lease_duration(&self) -> Duration {
        self.lease
    }

    /// The backoff policy.
    pub fn backoff_policy(&self) -> BackoffPolicy {
        self.backoff
    }

    /// The timeout actually applied to a receiver call: the configured one,
    /// capped at a third of the lease.
    pub fn effective_delivery_timeout(&self) -> Duration {
        self.delivery_timeout.min(self.lease / 3)
    }

    /// The time a claim must have left before a delivery may start: the
    /// delivery timeout plus a margin for the commit that follows.
    pub(crate) fn lease_needed_for_delivery(&self) -> Duration {
        self.effective_delivery_timeout() + self.lease / 6
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::{DEFAULT_INITIAL_BACKOFF, DEFAULT_MAX_BACKOFF};

    #[test]
    fn defaults_match_their_constants() {
        let config = DrainConfig::default();
        assert_eq!(config.batch_size, DEFAULT_BATCH_SIZE);
        assert_eq!(config.shards_per_claim, DEFAULT_SHARDS_PER_CLAIM);
        assert_eq!(config.concurrency, DEFAULT_CONCURRENCY);
        assert_eq!(config.lease, DEFAULT_LEASE);
        assert_eq!(config.delivery_timeout, DEFAULT_DELIVERY_TIMEOUT);
        assert_eq!(config.max_rows_per_claim, DEFAULT_MAX_ROWS_PER_CLAIM);
        assert_eq!(config.delete_chunk, DEFAULT_DELETE_CHUNK);
        assert_eq!(config.sync_wait, DEFAULT_SYNC_WAIT);
        assert_eq!(config.backoff.initial(), DEFAULT_INITIAL_BACKOFF);
        assert_eq!(config.backoff.max(), DEFAULT_MAX_BACKOFF);
        assert!(config.lease_needed_for_delivery() < config.lease);
    }

    #[test]
    fn delivery_timeout_never_outlives_the_lease() {
        let config = DrainConfig::default()
            .lease(Duration::from_secs(3))
            .delivery_timeout(Duration::from_secs(60));
        assert_eq!(config.effective_delivery_timeout(), Duration::from_secs(1));
        assert!(config.lease_needed_for_delivery() < Duration::from_secs(3));
    }
}
