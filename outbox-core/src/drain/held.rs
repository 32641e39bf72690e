//! The due rows this drainer's own background rounds hold while they
//! deliver: a claim beside them scans past them.
//!
//! A round's rows stay in the table until its commit deletes them, and
//! their buckets stay leased. A claim from the oldest end that starts
//! while rounds of the same drainer are still delivering (the worker claims
//! the next round as soon as the last claim answered) meets those rows
//! among the first it scans, and cannot take them. Scanning only a quarter
//! more than its window, it then finds its window part full: its shards are
//! few, its window is not doubled, and the next claim is as small. So a
//! claim from the oldest end scans as many rows more as the drainer's
//! rounds hold
//! ([`ClaimRequest::held_rows`](crate::store::ClaimRequest::held_rows)).
//! (Not one from the newest end: there the rows of rounds in flight are
//! rarely the first met, and where they are, as with a deep shard written
//! last, the rows past them are what the oldest end finds.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::shard::OutboxKind;

/// Rows held by a drainer's background rounds, per kind; shared by its
/// clones.
#[derive(Debug, Default)]
pub(crate) struct HeldRows {
    region: AtomicUsize,
    control: AtomicUsize,
}

impl HeldRows {
    fn of(&self, kind: OutboxKind) -> &AtomicUsize {
        match kind {
            OutboxKind::Region => &self.region,
            OutboxKind::Control => &self.control,
        }
    }

    /// Rows of `kind` held now.
    pub(crate) fn rows(&self, kind: OutboxKind) -> usize {
        self.of(kind).load(Ordering::SeqCst)
    }

    /// Counts `rows` of `kind` as held until the returned guard is dropped
    /// (the round's end, or its future dropped).
    pub(crate) fn hold(self: &Arc<Self>, kind: OutboxKind, rows: usize) -> Held {
        self.of(kind).fetch_add(rows, Ordering::SeqCst);
        Held {
            counts: self.clone(),
            kind,
            rows,
        }
    }
}

/// Rows a round holds, counted until it is dropped.
pub(crate) struct Held {
    counts: Arc<HeldRows>,
    kind: OutboxKind,
    rows: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.counts
            .of(self.kind)
            .fetch_sub(self.rows, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_held_until_the_guard_is_dropped() {
        let held = Arc::new(HeldRows::default());
        let first = held.hold(OutboxKind::Region, 256);
        let second = held.hold(OutboxKind::Region, 10);
        let control = held.hold(OutboxKind::Control, 3);
        assert_eq!(held.rows(OutboxKind::Region), 266);
        assert_eq!(held.rows(OutboxKind::Control), 3);
        drop(first);
        assert_eq!(held.rows(OutboxKind::Region), 10);
        drop((second, control));
        assert_eq!(held.rows(OutboxKind::Region), 0);
        assert_eq!(held.rows(OutboxKind::Control), 0);
    }
}
