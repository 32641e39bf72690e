//! A shard's head message: what blocks a failing or quarantined shard, and
//! what an operator moves aside so that the rest of it flows.

use crate::message::StoredRow;
use crate::registry::Category;
use crate::store::ShardState;

/// How many of a shard's oldest rows are read to find its head's group.
pub(crate) const HEAD_ROWS: usize = 1_000;
/// How many failing shards are read to find the head's shard state.
pub(crate) const FAILING_ROWS: usize = 10_000;

/// The oldest pending message of a shard and the rows delivered with it.
#[derive(Clone, Debug, PartialEq)]
pub struct HeadMessage {
    /// The shard's oldest pending row.
    pub row: StoredRow,
    /// The ids delivered together with it, its own first: for a category
    /// that coalesces, every pending row of the shard with its category and
    /// object (among the oldest 1,000); else itself alone.
    pub group: Vec<i64>,
    /// The shard's failure state (attempts, last error, next attempt), if
    /// it has failed.
    pub state: Option<ShardState>,
}

impl HeadMessage {
    /// The head of `rows` (a shard's oldest, in id order) and its group.
    pub(crate) fn of<C: Category>(rows: &[StoredRow], state: Option<ShardState>) -> Option<Self> {
        let row = rows.first()?.clone();
        let coalesces = C::try_from(row.category).is_ok_and(|category| category.coalesces());
        let group = if coalesces {
            rows.iter()
                .filter(|other| {
                    other.category == row.category
                        && other.object_identifier == row.object_identifier
                })
                .map(|other| other.id)
                .collect()
        } else {
            vec![row.id]
        };
        Some(Self { row, group, state })
    }

    /// The payload's size in bytes, as JSON.
    pub fn payload_size(&self) -> usize {
        self.row
            .payload
            .as_ref()
            .map_or(0, |payload| payload.as_str().len())
    }
}
