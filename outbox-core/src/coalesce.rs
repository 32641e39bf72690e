//! Coalescing: only the newest payload of a `(category, object)` is delivered.
//!
//! Rows read from one shard (in id order) are folded into
//! [`CoalescingGroup`]s, ordered by their lowest id; a group is delivered with
//! the row of its highest id, and acknowledging it deletes exactly the ids it
//! holds, so a row written while the group is being delivered stays for the next
//! round.
//!
//! A category declared `(no_coalesce)` in the registry is never folded: each
//! of its rows is a group of its own, delivered in id order among the others.

use std::collections::HashMap;

use crate::message::StoredRow;
use crate::trace::{TraceParent, MAX_TRACE_LINKS};

/// The rows of one `(category, object_identifier)` within a shard read.
#[derive(Clone, Debug, PartialEq)]
pub struct CoalescingGroup {
    /// Every row id of the group in this read, ascending.
    pub ids: Vec<i64>,
    /// The row with the lowest id (its `date_added` dates the group), without
    /// its payload: only the newest row's is delivered, and the group keeps
    /// no second copy of it.
    pub first: StoredRow,
    /// The row with the highest id: the one delivered.
    pub newest: StoredRow,
    /// The traces the delivery links to: one trace context per trace of the
    /// group's older rows, other than the newest row's trace, in id order,
    /// at most [`MAX_TRACE_LINKS`] (see [`crate::trace`]).
    pub linked_traces: Vec<TraceParent>,
}

impl CoalescingGroup {
    /// The group of one row.
    fn of(row: StoredRow) -> Self {
        let first = StoredRow {
            payload: None,
            shard: row.shard.clone(),
            ..row
        };
        Self {
            ids: vec![row.id],
            first,
            newest: row,
            linked_traces: Vec::new(),
        }
    }

    /// The stored category value.
    pub fn category(&self) -> i32 {
        self.newest.category
    }

    /// The object identifier.
    pub fn object_identifier(&self) -> i64 {
        self.newest.object_identifier
    }
}

/// Folds the rows of one shard into coalescing groups, ordered by lowest id.
///
/// `rows` need not be sorted; they must all belong to one shard.
/// `coalesces(category)` says whether rows of a stored category value fold
/// into one group per object (see [`Category::coalesces`](crate::Category::coalesces));
/// where it is `false`, every row is a group of its own.
pub fn coalesce(mut rows: Vec<StoredRow>, coalesces: impl Fn(i32) -> bool) -> Vec<CoalescingGroup> {
    if rows.len() == 1 {
        // One row: its own group (most shards of a round hold one).
        return rows.pop().map(CoalescingGroup::of).into_iter().collect();
    }
    rows.sort_by_key(|row| row.id);
    let mut index: HashMap<(i32, i64), usize> = HashMap::with_capacity(rows.len());
    let mut groups: Vec<CoalescingGroup> = Vec::with_capacity(rows.len());
    for row in rows {
        let folds = coalesces(row.category);
        let existing = if folds {
            index.get(&(row.category, row.object_identifier))
        } else {
            None
        };
        match existing {
            Some(&at) => {
                let group = &mut groups[at];
                group.ids.push(row.id);
                let older = std::mem::replace(&mut group.newest, row);
                if let Some(parent) = older.traceparent {
                    let linked = &mut group.linked_traces;
                    if linked.len() < MAX_TRACE_LINKS
                        && linked.iter().all(|l| l.trace_id() != parent.trace_id())
                    {
                        linked.push(parent);
                    }
                }
            }
            None => {
                if folds {
                    index.insert((row.category, row.object_identifier), groups.len());
                }
                groups.push(CoalescingGroup::of(row));
            }
        }
    }
    for group in &mut groups {
        // The newest row's trace is the delivery's parent, not a link.
        if let Some(parent) = group.newest.traceparent {
            group
                .linked_traces
                .retain(|linked| linked.trace_id() != parent.trace_id());
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::{OutboxKind, ShardKey};
    use chrono::Utc;
    use serde_json::json;

    fn row(id: i64, category: i32, object: i64) -> StoredRow {
        let now = Utc::now();
        StoredRow {
            id,
            message_id: uuid::Uuid::now_v7(),
            shard: ShardKey::from_raw(OutboxKind::Region, 0, 1, None),
            category,
            object_identifier: object,
            payload: Some(json!({ "id": id }).into()),
            scheduled_from: now,
            scheduled_for: now,
            date_added: now,
            traceparent: None,
            payload_version: None,
        }
    }

    #[test]
    fn groups_keep_lowest_id_order_and_newest_payload() {
        let rows = vec![
            row(5, 1, 10),
            row(1, 1, 10),
            row(2, 2, 10),
            row(3, 1, 11),
            row(4, 2, 10),
        ];
        let groups = coalesce(rows, |_| true);
        let shape: Vec<(i32, i64, Vec<i64>, i64)> = groups
            .iter()
            .map(|g| {
                (
                    g.category(),
                    g.object_identifier(),
                    g.ids.clone(),
                    g.newest.id,
                )
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                (1, 10, vec![1, 5], 5),
                (2, 10, vec![2, 4], 4),
                (1, 11, vec![3], 3),
            ]
        );
        assert_eq!(groups[0].newest.payload, Some(json!({ "id": 5 }).into()));
        assert_eq!(groups[0].first.id, 1);
    }

    #[test]
    fn a_category_that_does_not_coalesce_keeps_every_row() {
        let rows = vec![row(4, 2, 10), row(1, 1, 10), row(2, 2, 10), row(3, 1, 10)];
        let groups = coalesce(rows, |category| category != 2);
        let shape: Vec<(i32, Vec<i64>)> = groups
            .iter()
            .map(|g| (g.category(), g.ids.clone()))
            .collect();
        assert_eq!(shape, vec![(1, vec![1, 3]), (2, vec![2]), (2, vec![4])]);
    }
}
