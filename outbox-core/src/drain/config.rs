use std::time::Duration;

use crate::backoff::BackoffPolicy;

/// Default rows a round claims at most (and deletes in one statement): 20,000.
pub const DEFAULT_BATCH_SIZE: usize = 20_000;
/// Default [`DrainConfig::controls_refresh`]: 1 s.
pub const DEFAULT_CONTROLS_REFRESH: Duration = Duration::from_secs(1);
/// Default [`DrainConfig::recovery_batch`].
pub const DEFAULT_RECOVERY_BATCH: usize = 100;
/// Default shards delivered at once within a round: 16.
pub const DEFAULT_CONCURRENCY: usize = 16;
/// Default claim lease: 3 s, renewed every second while deliveries run.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(3);
/// Default time a receiver may take for one message: 10 s.
pub const DEFAULT_DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time a synchronous flush waits for a shard held elsewhere: 5 s.
pub const DEFAULT_SYNC_WAIT: Duration = Duration::from_secs(5);
/// Default time finished deliveries wait for the rest of their round before
/// they are committed on their own: 50 ms.
pub const DEFAULT_COMMIT_INTERVAL: Duration = Duration::from_millis(50);
/// Default time a round should take at the receivers' observed speed: 100 ms.
pub const DEFAULT_ROUND_DURATION: Duration = Duration::from_millis(100);

/// Default [`DrainConfig::count_cap`]: 10,000 rows.
pub const DEFAULT_COUNT_CAP: u64 = 10_000;

/// Default [`DrainConfig::park_interval`]: 30 s.
pub const DEFAULT_PARK_INTERVAL: Duration = Duration::from_secs(30);

/// Tuning of a [`Drainer`](super::Drainer). Every setter states its default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainConfig {
    pub(crate) batch_size: usize,
    pub(crate) concurrency: usize,
    pub(crate) lease: Duration,
    pub(crate) delivery_timeout: Duration,
    pub(crate) sync_wait: Duration,
    pub(crate) commit_interval: Duration,
    pub(crate) round_duration: Duration,
    pub(crate) backoff: BackoffPolicy,
    pub(crate) recovery_batch: usize,
    pub(crate) controls_refresh: Duration,
    pub(crate) count_cap: u64,
    pub(crate) park_interval: Duration,
}

impl Default for DrainConfig {
    fn default() -> Self {
        Self {
            batch_size: DEFAULT_BATCH_SIZE,
            concurrency: DEFAULT_CONCURRENCY,
            lease: DEFAULT_LEASE,
            delivery_timeout: DEFAULT_DELIVERY_TIMEOUT,
            sync_wait: DEFAULT_SYNC_WAIT,
            commit_interval: DEFAULT_COMMIT_INTERVAL,
            round_duration: DEFAULT_ROUND_DURATION,
            backoff: BackoffPolicy::default(),
            recovery_batch: DEFAULT_RECOVERY_BATCH,
            controls_refresh: DEFAULT_CONTROLS_REFRESH,
            count_cap: DEFAULT_COUNT_CAP,
            park_interval: DEFAULT_PARK_INTERVAL,
        }
    }
}

impl DrainConfig {
    /// Rows one round claims at most, and so deletes at most in one
    /// statement (at least 1). Fewer when receivers are slow: see
    /// [`round_duration`](Self::round_duration). Default: 20,000.
    pub fn batch_size(mut self, rows: usize) -> Self {
        self.batch_size = rows.max(1);
        self
    }

    /// Shards delivered at once within a round (at least 1). Default: 16.
    pub fn concurrency(mut self, shards: usize) -> Self {
        self.concurrency = shards.max(1);
        self
    }

    /// How long a claim holds its buckets without renewal. A round renews its
    /// claims every third of it while deliveries run; a crashed worker's
    /// shards are free again after at most this. Default: 3 s.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(30));
        self
    }

    /// How long one receiver call may take before it counts as failed.
    /// Independent of the lease, which is renewed meanwhile. Default: 10 s.
    pub fn delivery_timeout(mut self, timeout: Duration) -> Self {
        self.delivery_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// How long a synchronous flush waits for a shard whose bucket another
    /// worker holds before it leaves the rows to the background drain.
    /// Default: 5 s.
    pub fn sync_wait(mut self, wait: Duration) -> Self {
        self.sync_wait = wait;
        self
    }

    /// How long finished deliveries of a round wait for its slower ones
    /// before they are committed on their own and their buckets released: a
    /// slow receiver keeps only its own bucket, not the whole round's.
    /// Default: 50 ms.
    pub fn commit_interval(mut self, interval: Duration) -> Self {
        self.commit_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// How long a round should take at the speed receivers have shown: a
    /// round claims about `concurrency × round_duration ÷ mean delivery
    /// time` rows (at least `concurrency`, at most `batch_size`), so that
    /// slow receivers hold fewer buckets at a time. Default: 100 ms.
    pub fn round_duration(mut self, duration: Duration) -> Self {
        self.round_duration = duration.max(Duration::from_millis(1));
        self
    }

    /// Backoff of failing shards. Default: 1 s doubling to 1 h.
    pub fn backoff(mut self, backoff: BackoffPolicy) -> Self {
        self.backoff = backoff;
        self
    }

    /// How long a shard parked on a payload version its receiver does not
    /// know ([`UnknownVersion`](crate::UnknownVersion): a producer was
    /// deployed ahead) waits before it is tried again, always the same,
    /// without backoff: the most a rolling deploy's upgraded receiver
    /// waits to take it over. Default: 30 s.
    pub fn park_interval(mut self, interval: Duration) -> Self {
        self.park_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// When a delivery of a category succeeds again, how many shards that
    /// backed off on that category in this process are made due at once
    /// (at most once a second per category), instead of waiting out their
    /// backoff; 0 turns it off. Default: 100.
    pub fn recovery_batch(mut self, shards: usize) -> Self {
        self.recovery_batch = shards;
        self
    }

    /// The lease of a claim.
    pub fn lease_duration(&self) -> Duration {
        self.lease
    }

    /// How old the cache of runtime controls may grow before a round or a
    /// synchronous flush reads them again (one small read): a pause or a
    /// cull set in another process holds here within this time. Default:
    /// 1 s.
    pub fn controls_refresh(mut self, refresh: Duration) -> Self {
        self.controls_refresh = refresh;
        self
    }

    /// How many rows the admin reads ([`DrainView::backlog`], the worker's
    /// gauges, [`DrainView::snapshot`], and so the admin API, the dashboard
    /// and the CLI) count at most before they stop: a count up to it is
    /// exact, one above it an estimate from the database's statistics or
    /// "at least" the cap ([`Count`]), so that a huge backlog costs these
    /// reads no more than this many rows (at least 1). Default: 10,000.
    ///
    /// [`DrainView::backlog`]: super::DrainView::backlog
    /// [`DrainView::snapshot`]: super::DrainView::snapshot
    /// [`Count`]: crate::store::Count
    pub fn count_cap(mut self, rows: u64) -> Self {
        self.count_cap = rows.max(1);
        self
    }

    /// The backoff policy.
    pub fn backoff_policy(&self) -> BackoffPolicy {
        self.backoff
    }

    /// The timeout of one receiver call: what
    /// [`delivery_timeout`](Self::delivery_timeout) set (the lease is
    /// renewed while the call runs, so nothing shortens it).
    pub fn effective_delivery_timeout(&self) -> Duration {
        self.delivery_timeout
    }

    /// How often a round renews its claims: a third of the lease.
    pub(crate) fn heartbeat(&self) -> Duration {
        self.lease / 3
    }

    /// How long before its lease ends a round gives its deliveries up when
    /// renewals fail: a sixth of the lease, room for the commit's fence.
    pub(crate) fn lease_margin(&self) -> Duration {
        self.lease / 6
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
        assert_eq!(config.count_cap, DEFAULT_COUNT_CAP);
        assert_eq!(config.concurrency, DEFAULT_CONCURRENCY);
        assert_eq!(config.lease, DEFAULT_LEASE);
        assert_eq!(config.delivery_timeout, DEFAULT_DELIVERY_TIMEOUT);
        assert_eq!(config.sync_wait, DEFAULT_SYNC_WAIT);
        assert_eq!(config.commit_interval, DEFAULT_COMMIT_INTERVAL);
        assert_eq!(config.round_duration, DEFAULT_ROUND_DURATION);
        assert_eq!(config.backoff.initial(), DEFAULT_INITIAL_BACKOFF);
        assert_eq!(config.backoff.max(), DEFAULT_MAX_BACKOFF);
        assert_eq!(config.heartbeat(), Duration::from_secs(1));
        assert!(config.heartbeat() + config.lease_margin() < config.lease);
    }

    #[test]
    fn setters_keep_values_usable() {
        let config = DrainConfig::default()
            .batch_size(0)
            .concurrency(0)
            .lease(Duration::ZERO)
            .commit_interval(Duration::ZERO);
        assert_eq!((config.batch_size, config.concurrency), (1, 1));
        assert!(config.heartbeat() > Duration::ZERO);
        assert!(config.commit_interval > Duration::ZERO);
    }
}
