//! How a background claim looks for work: how big its window is ([`Pace`]),
//! from which end of the due rows, and how far it reads deep shards.
//!
//! A claim picks its shards among a window of due rows of free buckets,
//! scanning a bounded number of them ([`ClaimRequest::scan_limit`]). Taken from
//! the oldest end only, that window has two blind spots: a backlog delays
//! every row written after it until it is drained, and a deep shard whose
//! bucket is held while a round delivers it fills the scan with rows that
//! cannot be taken, so that the claim finds nothing else, at the price of a
//! scan over them. Taken from the newest end, it finds what was just
//! written at once. So claims look at both ends: three claims in four at
//! the oldest end (there the window holds each shard's oldest rows, which
//! a store may return as read: the cheaper claim on a backlog of shallow
//! shards), the fourth at the newest ([`OLDEST_RUN`]). Each end has a
//! window of its own: it starts small ([`PROBE_ROWS`]), doubles with
//! every claim that filled it without being *blocked* and read each of its
//! shards in full (a backlog of shallow shards: bigger windows cost less per
//! row; not a deep shard that filled it and was read in part), up to what
//! the receivers' pace allows, and falls back to small when a claim was blocked
//! (it scanned as far as it may and found mostly held rows). A deep shard
//! being delivered then costs the claims looking past it a cheap look, not
//! a scan over its backlog; and while the oldest end's last claim was
//! blocked and claims keep finding a deep shard (within [`CONTENDED_FOR`]),
//! every claim looks at the newest end, where everything else written
//! since is (the deep shard too: it is read from its oldest row whatever
//! end found it), and the cold rows no longer wait for looks at held rows.
//! Once the deep shard is gone, the oldest end is favoured again. Whatever the end and the window, a claimed
//! shard is read from its oldest pending row: the window only chooses the
//! shards, never their order.
//!
//! A deep shard is read in batches ([`ClaimRequest::shard_rows`]): the
//! batch size split over the delivery tasks ([`DrainConfig`]'s `batch_size
//! ÷ concurrency`), so that one shard's round does not hold the machine for
//! long; but while other shards keep coming (claims found both a deep shard
//! read to its limit and other shards within [`CONTENDED_FOR`]), batches of
//! [`CONTENDED_SHARD_ROWS`]: the deep shard then drains slower, and the
//! other shards' rows wait for it less.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::config::DrainConfig;
use super::pace::Pace;
use crate::store::{ClaimOrder, ClaimRequest, DueClaim};

/// The smallest window, that of an end whose last claim was blocked: 256
/// rows.
pub(crate) const PROBE_ROWS: usize = 256;

/// Claims from the oldest end between two from the newest (unless a deep
/// shard blocks the oldest end): 3.
pub(crate) const OLDEST_RUN: u32 = 3;

/// A deep shard's batch while other shards keep coming: 128 rows.
pub(crate) const CONTENDED_SHARD_ROWS: usize = 128;

/// How recently claims must have found a deep shard and other shards for
/// the deep one to be read in small batches: 250 ms.
pub(crate) const CONTENDED_FOR: Duration = Duration::from_millis(250);

/// Plans a drainer's background claims; shared by its clones, whose claims
/// may run at the same time.
#[derive(Debug, Default)]
pub(crate) struct ClaimPlanner {
    pace: Pace,
    state: Mutex<PlannerState>,
}

#[derive(Debug)]
struct PlannerState {
    /// Claims from the oldest end since the last from the newest.
    oldest_run: u32,
    /// The window of the oldest end.
    oldest_window: usize,
    /// The window of the newest end.
    newest_window: usize,
    /// When a claim last returned a shard read as far as it may be.
    deep_at: Option<Instant>,
    /// When a claim last returned a shard read in full.
    shallow_at: Option<Instant>,
    /// Whether the last claim from the oldest end was blocked.
    oldest_blocked: bool,
}

impl Default for PlannerState {
    /// The first claim takes the oldest rows.
    fn default() -> Self {
        Self {
            oldest_run: 0,
            oldest_window: PROBE_ROWS,
            newest_window: PROBE_ROWS,
            deep_at: None,
            shallow_at: None,
            oldest_blocked: false,
        }
    }
}

impl PlannerState {
    fn contended(&self) -> bool {
        recent(self.deep_at) && recent(self.shallow_at)
    }

    /// The oldest end's last claim was blocked and a deep shard is still
    /// being read: the oldest end holds its held rows, the newest end
    /// whatever else comes.
    fn oldest_held(&self) -> bool {
        self.oldest_blocked && recent(self.deep_at)
    }

    fn window(&mut self, order: ClaimOrder) -> &mut usize {
        match order {
            ClaimOrder::Oldest => &mut self.oldest_window,
            ClaimOrder::Newest => &mut self.newest_window,
        }
    }
}

fn recent(at: Option<Instant>) -> bool {
    at.is_some_and(|at| at.elapsed() < CONTENDED_FOR)
}

impl ClaimPlanner {
    fn lock(&self) -> std::sync::MutexGuard<'_, PlannerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The receivers' pace.
    pub(crate) fn pace(&self) -> &Pace {
        &self.pace
    }

    /// Sets the next claim's end, window and reach into deep shards.
    pub(crate) fn plan(&self, config: &DrainConfig, request: &mut ClaimRequest) {
        let rows = self.pace.rows_per_round(config);
        let mut state = self.lock();
        let order = if state.oldest_held() || state.oldest_run >= OLDEST_RUN {
            state.oldest_run = 0;
            ClaimOrder::Newest
        } else {
            state.oldest_run += 1;
            ClaimOrder::Oldest
        };
        request.order = order;
        request.rows = (*state.window(order)).min(rows);
        // Deep shards read on up to the batch size in all, each as far as
        // its share of the delivery tasks.
        request.beyond = config.batch_size.saturating_sub(request.rows);
        let batch = (config.batch_size / config.concurrency).max(PROBE_ROWS);
        request.shard_rows = if state.contended() {
            CONTENDED_SHARD_ROWS
        } else {
            batch
        };
    }

    /// Learns from what a claim found.
    pub(crate) fn observe(&self, request: &ClaimRequest, claim: &DueClaim) {
        let mut state = self.lock();
        let now = Some(Instant::now());
        let read_in_part = claim
            .shards
            .iter()
            .any(|shard| shard.rows.len() >= request.shard_rows);
        if read_in_part {
            state.deep_at = now;
        }
        if claim
            .shards
            .iter()
            .any(|shard| shard.rows.len() < request.shard_rows)
        {
            state.shallow_at = now;
        }
        if request.order == ClaimOrder::Oldest {
            state.oldest_blocked = claim.is_blocked(request);
        }
        let window = state.window(request.order);
        if claim.is_blocked(request) {
            *window = PROBE_ROWS;
        } else if claim.window >= request.rows && !read_in_part {
            // A full window of shards read in full (not a deep shard that
            // filled it and was read only in part). The pace caps it when
            // planning.
            *window = request.rows.saturating_mul(2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::{OutboxKind, ShardKey};
    use crate::store::ClaimedShard;

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
            shard_rows: usize::MAX,
            held_rows: 0,
        }
    }

    fn claim(window: usize, scanned: usize) -> DueClaim {
        // One shard per window row.
        let shards = (0..window)
            .map(|id| ClaimedShard {
                shard: ShardKey::from_raw(OutboxKind::Region, 0, id as i64, None),
                rows: vec![row(id as i64)],
                state: None,
                fence: crate::FencingToken::default(),
            })
            .collect();
        DueClaim {
            shards,
            window,
            scanned,
        }
    }

    fn row(id: i64) -> crate::message::StoredRow {
        let now = chrono::Utc::now();
        crate::message::StoredRow {
            id,
            message_id: crate::uuid::Uuid::nil(),
            shard: ShardKey::from_raw(OutboxKind::Region, 0, id, None),
            category: 1,
            object_identifier: id,
            payload: None,
            scheduled_from: now,
            scheduled_for: now,
            date_added: now,
            traceparent: None,
            payload_version: None,
        }
    }

    fn next(planner: &ClaimPlanner) -> ClaimRequest {
        let mut request = request();
        planner.plan(&DrainConfig::default(), &mut request);
        request
    }

    /// The next claim planned from `order`, the others planned before it
    /// left unanswered.
    fn next_from(planner: &ClaimPlanner, order: ClaimOrder) -> ClaimRequest {
        loop {
            let request = next(planner);
            if request.order == order {
                return request;
            }
        }
    }

    #[test]
    fn claims_look_at_the_newest_end_one_time_in_four() {
        let planner = ClaimPlanner::default();
        let mut orders = Vec::new();
        for _ in 0..8 {
            // Planned before the others answer: claims run at the same time.
            orders.push(next(&planner).order);
        }
        use ClaimOrder::{Newest, Oldest};
        assert_eq!(
            orders,
            [Oldest, Oldest, Oldest, Newest, Oldest, Oldest, Oldest, Newest]
        );
    }

    #[test]
    fn a_window_doubles_while_full_and_falls_back_when_blocked() {
        let planner = ClaimPlanner::default();
        let mut oldest = Vec::new();
        for _ in 0..4 {
            let request = next_from(&planner, ClaimOrder::Oldest);
            oldest.push(request.rows);
            planner.observe(&request, &claim(request.rows, request.rows));
        }
        // Up to what the pace allows (1,600 rows before any delivery).
        assert_eq!(oldest, [256, 512, 1024, 1600]);
        // The newest end found nothing: its window stays.
        assert_eq!(next_from(&planner, ClaimOrder::Newest).rows, PROBE_ROWS);
        // A deep shard that filled the window, read in part.
        let deep = next_from(&planner, ClaimOrder::Oldest);
        let mut read_in_part = claim(0, deep.rows);
        read_in_part.window = deep.rows;
        read_in_part.shards = vec![ClaimedShard {
            shard: ShardKey::from_raw(OutboxKind::Region, 0, 1, None),
            rows: (0..deep.shard_rows as i64).map(row).collect(),
            state: None,
            fence: crate::FencingToken::default(),
        }];
        planner.observe(&deep, &read_in_part);
        let request = next_from(&planner, ClaimOrder::Oldest);
        assert_eq!(request.rows, deep.rows, "did not grow");
        // The whole bounded scan, and not a window's worth of free rows.
        planner.observe(&request, &claim(3, request.scan_limit()));
        // (The deep shard is gone: otherwise every claim now looks at the
        // newest end, see the next test.)
        planner.lock().deep_at = None;
        let probe = next_from(&planner, ClaimOrder::Oldest);
        assert_eq!(probe.rows, PROBE_ROWS);
        assert_eq!(probe.rows + probe.beyond, DrainConfig::default().batch_size);
    }

    #[test]
    fn while_a_deep_shard_blocks_the_oldest_end_claims_look_at_the_newest() {
        use ClaimOrder::{Newest, Oldest};
        let planner = ClaimPlanner::default();
        let oldest = next(&planner);
        assert_eq!(oldest.order, Oldest);
        planner.observe(&oldest, &claim(0, oldest.scan_limit()));
        // Blocked, but no deep shard seen: claims go on as before.
        assert_eq!(next(&planner).order, Oldest);
        // The newest end finds the deep shard (read as far as it may be).
        let newest = next_from(&planner, Newest);
        let mut deep = claim(0, 0);
        deep.shards = vec![ClaimedShard {
            shard: ShardKey::from_raw(OutboxKind::Region, 0, 1, None),
            rows: (0..newest.shard_rows as i64).map(row).collect(),
            state: None,
            fence: crate::FencingToken::default(),
        }];
        planner.observe(&newest, &deep);
        let orders: Vec<_> = (0..8).map(|_| next(&planner).order).collect();
        assert_eq!(orders, [Newest; 8]);
        // The deep shard gone (not seen for CONTENDED_FOR): the oldest end
        // again.
        planner.lock().deep_at = Some(Instant::now() - CONTENDED_FOR);
        let orders: Vec<_> = (0..4).map(|_| next(&planner).order).collect();
        assert!(orders.contains(&Oldest), "{orders:?}");
        // And a claim from the oldest end that is not blocked clears it.
        let oldest = next_from(&planner, Oldest);
        planner.observe(&oldest, &claim(3, 3));
        planner.lock().deep_at = Some(Instant::now());
        let orders: Vec<_> = (0..4).map(|_| next(&planner).order).collect();
        assert!(orders.contains(&Oldest), "{orders:?}");
    }

    #[test]
    fn a_shard_is_read_as_far_as_its_share_of_the_delivery_tasks() {
        let request = next(&ClaimPlanner::default());
        assert_eq!(request.shard_rows, 20_000 / 16);
    }

    #[test]
    fn a_deep_shard_beside_others_is_read_in_small_batches() {
        let planner = ClaimPlanner::default();
        let request = next(&planner);
        let mut deep = claim(0, 0);
        deep.shards = vec![ClaimedShard {
            shard: ShardKey::from_raw(OutboxKind::Region, 0, 1, None),
            rows: (0..request.shard_rows as i64).map(row).collect(),
            state: None,
            fence: crate::FencingToken::default(),
        }];
        planner.observe(&request, &deep);
        let alone = next(&planner);
        assert_eq!(alone.shard_rows, request.shard_rows, "nothing else came");
        planner.observe(&alone, &claim(2, 2));
        assert_eq!(next(&planner).shard_rows, CONTENDED_SHARD_ROWS);
    }

    #[test]
    fn deep_shards_read_up_to_the_batch_size() {
        let planner = ClaimPlanner::default();
        let request = next(&planner);
        let config = DrainConfig::default();
        assert_eq!(request.rows + request.beyond, config.batch_size);
    }
}
