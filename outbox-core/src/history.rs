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

use std::time::Duration;

use chrono::{DateTime, Utc};

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
}
