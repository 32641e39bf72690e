//! What one process's rounds did since its last history sample (see
//! [`crate::history`]), and the samples a worker records from a backlog.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::report::DrainReport;
use super::view::Backlog;
use crate::history::Sample;
use crate::shard::OutboxKind;

/// What one process's drains did since the last sample, per table.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    counts: [[AtomicU64; 3]; 2],
}

fn index(kind: OutboxKind) -> usize {
    match kind {
        OutboxKind::Region => 0,
        OutboxKind::Control => 1,
    }
}

impl Tally {
    /// Adds a round's (or a flush's) report.
    pub(crate) fn add(&self, kind: OutboxKind, report: &DrainReport) {
        let counts = &self.counts[index(kind)];
        counts[0].fetch_add(report.deliveries as u64, Ordering::Relaxed);
        counts[1].fetch_add(report.failures.len() as u64, Ordering::Relaxed);
        counts[2].fetch_add(report.dead_lettered, Ordering::Relaxed);
    }

    /// Deliveries, failures and dead letters of `kind` since the last call.
    fn take(&self, kind: OutboxKind) -> [u64; 3] {
        let counts = &self.counts[index(kind)];
        [0, 1, 2].map(|i| counts[i].swap(0, Ordering::Relaxed))
    }

    /// The samples of `backlog`, at `at` rounded down to `interval`: one
    /// for the table (with this process's counts since the last call) and
    /// one per scope.
    pub(crate) fn samples(
        &self,
        backlog: &Backlog,
        owner: &str,
        at: DateTime<Utc>,
        interval: Duration,
    ) -> Vec<Sample> {
        let at = round_down(at, interval);
        let [delivered, failed, dead_lettered] = self.take(backlog.kind);
        let millis =
            |age: Option<Duration>| age.map(|age| Duration::from_millis(age.as_millis() as u64));
        let mut samples = vec![Sample {
            at,
            kind: backlog.kind,
            scope: None,
            owner: owner.to_owned(),
            depth: backlog.depth.value(),
            oldest_age: millis(backlog.oldest_age),
            delivered,
            failed,
            dead_lettered,
            dead_letters: backlog.dead_letters.value(),
        }];
        samples.extend(backlog.scopes.iter().map(|scope| Sample {
            at,
            kind: backlog.kind,
            scope: Some(scope.label()),
            owner: owner.to_owned(),
            depth: scope.depth.value(),
            oldest_age: millis(scope.oldest_age),
            delivered: 0,
            failed: 0,
            dead_lettered: 0,
            dead_letters: 0,
        }));
        samples
    }
}

/// `at` rounded down to a multiple of `interval` (whole seconds, at least
/// one) since the epoch.
fn round_down(at: DateTime<Utc>, interval: Duration) -> DateTime<Utc> {
    let step = i64::try_from(interval.as_secs().max(1)).unwrap_or(i64::MAX);
    let seconds = at.timestamp().div_euclid(step) * step;
    DateTime::from_timestamp(seconds, 0).unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_times_line_up_on_the_interval() {
        let at = DateTime::from_timestamp(1_000_007, 500).unwrap();
        assert_eq!(
            round_down(at, Duration::from_secs(15)).timestamp(),
            1_000_005
        );
        assert_eq!(round_down(at, Duration::ZERO).timestamp(), 1_000_007);
    }
}
