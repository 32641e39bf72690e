//! Whole-shard exponential backoff.
//!
//! When a delivery fails, its shard stops (head-of-line) and is rescheduled as a
//! whole: the first failure waits [`DEFAULT_INITIAL_BACKOFF`], each further one
//! twice the previous delay, up to [`DEFAULT_MAX_BACKOFF`]. A success resets it.

use std::time::Duration;

/// Default delay after a shard's first failure: 1 s.
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// Default cap on a shard's delay: 1 h.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(3600);

/// How long a failing shard waits before its next attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffPolicy {
    initial: Duration,
    max: Duration,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        Self::new(DEFAULT_INITIAL_BACKOFF, DEFAULT_MAX_BACKOFF)
    }
}

impl BackoffPolicy {
    /// A policy starting at `initial` and doubling up to `max`. A zero `initial`
    /// is raised to one millisecond, and `max` is at least `initial`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        let initial = initial.max(Duration::from_millis(1));
        Self {
            initial,
            max: max.max(initial),
        }
    }

    /// The delay after the first failure. Default: 1 s.
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The cap. Default: 1 h.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The delay after a failure, given the delay that preceded it (`None` or
    /// zero when the shard had not failed since its last success).
    pub fn next_delay(&self, previous: Option<Duration>) -> Duration {
        match previous {
            None => self.initial,
            Some(previous) if previous.is_zero() => self.initial,
            Some(previous) => previous.saturating_mul(2).clamp(self.initial, self.max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_one_second_doubling_to_one_hour() {
        let policy = BackoffPolicy::default();
        assert_eq!(policy.initial(), Duration::from_secs(1));
        assert_eq!(policy.max(), Duration::from_secs(3600));
        let mut delays = Vec::new();
        let mut last = None;
        for _ in 0..15 {
            let next = policy.next_delay(last);
            delays.push(next.as_secs());
            last = Some(next);
        }
        assert_eq!(
            delays,
            [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3600, 3600, 3600]
        );
    }

    #[test]
    fn custom_policy_clamps_and_restarts_after_success() {
        let policy = BackoffPolicy::new(Duration::from_millis(100), Duration::from_millis(250));
        assert_eq!(policy.next_delay(None), Duration::from_millis(100));
        assert_eq!(
            policy.next_delay(Some(Duration::from_millis(100))),
            Duration::from_millis(200)
        );
        assert_eq!(
            policy.next_delay(Some(Duration::from_millis(200))),
            Duration::from_millis(250)
        );
        assert_eq!(
            policy.next_delay(Some(Duration::ZERO)),
            Duration::from_millis(100)
        );
    }
}
