//! How a background claim looks for work: how big its window is ([`Pace`]),
//! from which end of the due rows, and how far it reads deep shards.
//!
//! A claim picks its shards among a window of due rows of free buckets,
//! scanning at most twice the window ([`ClaimRequest::rows`]). Taken from
//! the oldest end only, that window has two blind spots: a backlog delays
//! every row written after it until it is drained, and a deep shard whose
//! bucket is held while a round delivers it fills the scan with rows that
//! cannot be taken, so that the claim finds nothing else. Taken from the
//! newest end, it finds what was just written at once. So claims alternate
//! between the two ends; and when a claim from one end was *blocked* (it
//! scanned as far as it may and found mostly held rows), the planner takes
//! the other end for [`BLOCKED_FOR`] before it looks there again. Whatever
//! the end, a claimed shard is read from its oldest pending row: the end
//! only chooses the shards, never their order.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::config::DrainConfig;
use super::pace::Pace;
use crate::store::{ClaimOrder, ClaimRequest, DueClaim};

/// How long the planner keeps away from an end whose last claim was
/// blocked: 250 ms.
pub(crate) const BLOCKED_FOR: Duration = Duration::from_millis(250);

/// Plans a drainer's background claims; shared by its clones.
#[derive(Debug, Default)]
pub(crate) struct ClaimPlanner {
    pace: Pace,
    state: Mutex<PlannerState>,
}

#[derive(Debug)]
struct PlannerState {
    /// The end of the last claim.
    last: ClaimOrder,
    /// When a claim from the oldest end was last blocked.
    oldest_blocked: Option<Instant>,
    /// When a claim from the newest end was last blocked.
    newest_blocked: Option<Instant>,
}

impl Default for PlannerState {
    /// The first claim takes the oldest rows.
    fn default() -> Self {
        Self {
            last: ClaimOrder::Newest,
            oldest_blocked: None,
            newest_blocked: None,
        }
    }
}

impl PlannerState {
    fn blocked(&self, order: ClaimOrder) -> bool {
        let at = match order {
            ClaimOrder::Oldest => self.oldest_blocked,
            ClaimOrder::Newest => self.newest_blocked,
        };
        at.is_some_and(|at| at.elapsed() < BLOCKED_FOR)
    }
}

fn other(order: ClaimOrder) -> ClaimOrder {
    match order {
        ClaimOrder::Oldest => ClaimOrder::Newest,
        ClaimOrder::Newest => ClaimOrder::Oldest,
    }
}

impl ClaimPlanner {
    fn lock(&self) -> std::sync::MutexGuard<'_, PlannerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The receivers' pace.
    pub(crate) fn pace(&self) -> &Pace {
        &self.pace
    }

    /// Sets the next claim's window, end and reach into deep shards.
    pub(crate) fn plan(&self, config: &DrainConfig, request: &mut ClaimRequest) {
        let rows = self.pace.rows_per_round(config);
        request.rows = rows;
        // Deep shards read on up to the batch size in all.
        request.beyond = config.batch_size.saturating_sub(rows);
        let state = self.lock();
        let next = other(state.last);
        request.order = if state.blocked(next) && !state.blocked(state.last) {
            state.last
        } else {
            next
        };
    }

    /// Learns from what a claim found.
    pub(crate) fn observe(&self, request: &ClaimRequest, claim: &DueClaim) {
        let mut state = self.lock();
        state.last = request.order;
        if claim.is_blocked(request) {
            let now = Some(Instant::now());
            match request.order {
                ClaimOrder::Oldest => state.oldest_blocked = now,
                ClaimOrder::Newest => state.newest_blocked = now,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::OutboxKind;

    fn request() -> ClaimRequest {
        let now = chrono::Utc::now();
        ClaimRequest {
            kind: OutboxKind::Region,
            now,
            lease_until: now,
            token: 1,
            owner: "test".to_owned(),
            rows: 0,
            up_to_id: None,
            order: ClaimOrder::Oldest,
            beyond: 0,
        }
    }

    fn claim(window: usize, scanned: usize) -> DueClaim {
        DueClaim {
            shards: Vec::new(),
            window,
            scanned,
        }
    }

    fn next(planner: &ClaimPlanner) -> ClaimRequest {
        let mut request = request();
        planner.plan(&DrainConfig::default(), &mut request);
        request
    }

    #[test]
    fn claims_alternate_between_the_two_ends() {
        let planner = ClaimPlanner::default();
        let mut orders = Vec::new();
        for _ in 0..4 {
            let request = next(&planner);
            orders.push(request.order);
            planner.observe(&request, &claim(1, 1));
        }
        use ClaimOrder::{Newest, Oldest};
        assert_eq!(orders, [Oldest, Newest, Oldest, Newest]);
    }

    #[test]
    fn a_blocked_end_is_left_alone_for_a_while() {
        let planner = ClaimPlanner::default();
        let mut request = next(&planner);
        request.order = ClaimOrder::Oldest;
        // The whole bounded scan, and not a window's worth of free rows.
        planner.observe(&request, &claim(0, request.rows * 2));
        for _ in 0..3 {
            let request = next(&planner);
            assert_eq!(request.order, ClaimOrder::Newest);
            planner.observe(&request, &claim(1, 1));
        }
    }

    #[test]
    fn with_both_ends_blocked_claims_still_alternate() {
        let planner = ClaimPlanner::default();
        for order in [ClaimOrder::Oldest, ClaimOrder::Newest] {
            let mut request = next(&planner);
            request.order = order;
            planner.observe(&request, &claim(0, request.rows * 2));
        }
        let first = next(&planner).order;
        planner.observe(
            &ClaimRequest {
                order: first,
                ..next(&planner)
            },
            &claim(0, 0),
        );
        assert_ne!(next(&planner).order, first);
    }

    #[test]
    fn deep_shards_read_up_to_the_batch_size() {
        let planner = ClaimPlanner::default();
        let request = next(&planner);
        let config = DrainConfig::default();
        assert_eq!(request.rows + request.beyond, config.batch_size);
    }
}
