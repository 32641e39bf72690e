//! History: what the outbox looked like over time, for the dashboard's
//! charts and `GET /history`, without a Prometheus of your own.
//!
//! Every background worker records a [`Sample`] per table and per scope
//! each gauge interval (15 s by default), in one statement, into a table
//! every process shares (`outbox_history`); records older than the
//! retention (24 h by default) are removed as new ones are written. Depths
//! and ages are read from the database, so every worker records the same
//! ones (a reader takes the largest); deliveries, failures and dead
//! letters are each worker's own since its last sample (a reader adds
//! them up).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::drain::{Backlog, DrainReport};
use crate::shard::OutboxKind;

/// How long samples are kept by default: 24 hours.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// One worker's measure of one table (or one scope of it) at one time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// When, rounded down to the worker's sampling interval (so that the
    /// samples of several workers line up).
    pub at: DateTime<Utc>,
    /// The table.
    pub kind: OutboxKind,
    /// The scope's name, or `None` for the whole table.
    pub scope: Option<String>,
    /// The worker that took it.
    pub owner: String,
    /// Rows pending.
    pub depth: u64,
    /// How long the oldest pending row had waited (whole milliseconds).
    pub oldest_age: Option<Duration>,
    /// Deliveries by this worker since its previous sample (table rows
    /// only; 0 for a scope).
    pub delivered: u64,
    /// Failed deliveries by this worker since its previous sample.
    pub failed: u64,
    /// Rows this worker dead-lettered since its previous sample.
    pub dead_lettered: u64,
    /// Rows in the dead-letter table (table rows only).
    pub dead_letters: u64,
}

/// One point of a chart: the samples of every worker at one time, merged
/// (depths and ages the largest, counts added up).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Point {
    /// When.
    pub at: DateTime<Utc>,
    /// Rows pending.
    pub depth: u64,
    /// How long the oldest pending row had waited.
    pub oldest_age: Option<Duration>,
    /// Deliveries in the interval before it, all workers.
    pub delivered: u64,
    /// Failed deliveries in the interval before it.
    pub failed: u64,
    /// Rows dead-lettered in the interval before it.
    pub dead_lettered: u64,
    /// Rows in the dead-letter table.
    pub dead_letters: u64,
}

/// The whole-table samples of `kind`, merged per time, oldest first.
pub fn points(samples: &[Sample], kind: OutboxKind) -> Vec<Point> {
    let mut points: Vec<Point> = Vec::new();
    let mut table: Vec<&Sample> = samples
        .iter()
        .filter(|sample| sample.kind == kind && sample.scope.is_none())
        .collect();
    table.sort_by_key(|sample| sample.at);
    for sample in table {
        match points.last_mut() {
            Some(point) if point.at == sample.at => {
                point.depth = point.depth.max(sample.depth);
                point.oldest_age = point.oldest_age.max(sample.oldest_age);
                point.delivered += sample.delivered;
                point.failed += sample.failed;
                point.dead_lettered += sample.dead_lettered;
                point.dead_letters = point.dead_letters.max(sample.dead_letters);
            }
            _ => points.push(Point {
                at: sample.at,
                depth: sample.depth,
                oldest_age: sample.oldest_age,
                delivered: sample.delivered,
                failed: sample.failed,
                dead_lettered: sample.dead_lettered,
                dead_letters: sample.dead_letters,
            }),
        }
    }
    points
}

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
            depth: backlog.depth,
            oldest_age: millis(backlog.oldest_age),
            delivered,
            failed,
            dead_lettered,
            dead_letters: backlog.dead_letters,
        }];
        samples.extend(backlog.scopes.iter().map(|scope| Sample {
            at,
            kind: backlog.kind,
            scope: Some(scope.scope.clone()),
            owner: owner.to_owned(),
            depth: scope.depth,
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

    fn sample(at: i64, owner: &str, depth: u64, delivered: u64) -> Sample {
        Sample {
            at: DateTime::from_timestamp(at, 0).unwrap(),
            kind: OutboxKind::Region,
            scope: None,
            owner: owner.to_owned(),
            depth,
            oldest_age: Some(Duration::from_secs(depth)),
            delivered,
            failed: 0,
            dead_lettered: 0,
            dead_letters: 0,
        }
    }

    #[test]
    fn the_samples_of_several_workers_merge_per_time() {
        let mut scoped = sample(15, "a", 99, 0);
        scoped.scope = Some("OrgScope".to_owned());
        let mut control = sample(15, "a", 77, 0);
        control.kind = OutboxKind::Control;
        let samples = vec![
            sample(30, "b", 5, 7),
            sample(15, "a", 10, 3),
            sample(15, "b", 12, 4),
            sample(30, "a", 6, 1),
            scoped,
            control,
        ];
        let points = points(&samples, OutboxKind::Region);
        let got: Vec<(i64, u64, u64)> = points
            .iter()
            .map(|p| (p.at.timestamp(), p.depth, p.delivered))
            .collect();
        assert_eq!(got, [(15, 12, 7), (30, 6, 8)]);
        assert_eq!(points[0].oldest_age, Some(Duration::from_secs(12)));
    }

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
