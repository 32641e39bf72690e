//! `GET /history`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::super::error::AdminError;
use super::query::region;
use super::Kind;

/// `GET /history`: one table's merged history samples, oldest first.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HistoryView {
    /// The table.
    #[schema(value_type = String, example = "region")]
    pub kind: Kind,
    /// How far back, in minutes.
    pub minutes: u32,
    /// One point per sampling time (every worker's samples merged).
    pub points: Vec<PointView>,
}

/// One point of [`HistoryView`].
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PointView {
    /// When.
    pub at: DateTime<Utc>,
    /// Rows pending.
    pub depth: u64,
    /// How long the oldest pending row had waited, in seconds.
    pub oldest_age_seconds: Option<f64>,
    /// Deliveries in the interval before it (all workers).
    pub delivered: u64,
    /// Failed deliveries in the interval before it.
    pub failed: u64,
    /// Rows dead-lettered in the interval before it.
    pub dead_lettered: u64,
    /// Rows in the dead-letter table.
    pub dead_letters: u64,
}

impl From<&outbox_core::history::Point> for PointView {
    fn from(point: &outbox_core::history::Point) -> Self {
        Self {
            at: point.at,
            depth: point.depth,
            oldest_age_seconds: point.oldest_age.map(|age| age.as_secs_f64()),
            delivered: point.delivered,
            failed: point.failed,
            dead_lettered: point.dead_lettered,
            dead_letters: point.dead_letters,
        }
    }
}

/// `?kind=region&minutes=60` of `GET /history`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HistoryQuery {
    #[serde(default = "region")]
    pub(crate) kind: Kind,
    #[serde(default = "sixty")]
    pub(crate) minutes: u32,
}

fn sixty() -> u32 {
    60
}

/// The longest history asked for: 7 days, in minutes.
pub(crate) const MAX_HISTORY_MINUTES: u32 = 7 * 24 * 60;

impl HistoryQuery {
    pub(crate) fn checked(self) -> Result<(Kind, u32), AdminError> {
        if self.minutes == 0 || self.minutes > MAX_HISTORY_MINUTES {
            return Err(AdminError::bad_request(format!(
                "`minutes` must be between 1 and {MAX_HISTORY_MINUTES}"
            )));
        }
        Ok((self.kind, self.minutes))
    }
}
