//! Where a background claim starts scanning the due index: the watermark
//! below which, as far as this process can prove, no row due since it was
//! written is pending.
//!
//! Every delivered row leaves an entry in the due index `(scheduled_for,
//! id)` until vacuum removes it, and vacuum cannot while a long transaction
//! (an `idle in transaction` session, a report, a `pg_dump`, a lagging
//! replica slot) holds its horizon back. A claim that scans from the very
//! start then steps over every row delivered since the horizon stopped, and
//! costs more with every minute the horizon stays (measured: `cargo bench
//! -p outbox-axum --bench vacuum_pressure`). So,
//! once a claim from the very start takes [`SLOW_FULL_SCAN`] or more, and
//! [`SLOW_FULL_SCAN_PER_ROW`] or more for each row it scanned or returned
//! (a claim of a deep backlog's wide window takes long without stepping
//! over anything), claims scan from the watermark (`claim_due_above.sql`,
//! `claim_due_newest.sql`), and one claim from the very start
//! (`claim_due_oldest.sql`) runs at most every [`FULL_SCAN_EVERY`], which
//! also tells when vacuum has caught up. While it is cheap, every claim
//! scans from the start as before: reading each leased shard by range
//! (what a claim from the watermark must do) costs more than stepping over
//! removed rows' entries that vacuum has already marked dead.
//!
//! The watermark only limits which shards a claim *finds*; a leased shard
//! is always read from its oldest pending row. So a watermark that is too
//! high (a row below it that this process could not see coming: a shard
//! made due again by a retry or a replay in another process) delays that
//! row until the next full scan or the next row of its shard, and never
//! reorders or loses it.
//!
//! How it moves. A claim's statement reports `head`, the lowest id among
//! the rows it scanned that are due since they were written
//! (`scheduled_for` = `due_at_once()`), and its snapshot's `xmin` and `xmax`.
//! Rows are numbered by a sequence before their transaction commits, so a
//! row numbered below `head` may still be invisible to that snapshot: its
//! transaction was running. `head` becomes a *candidate*; once a later
//! claim's snapshot has `xmin ≥` the candidate's `xmax` (every transaction
//! that was running has ended) and [`GRACE`] has passed (a row whose number
//! was drawn an instant before its transaction took an id), that later
//! claim's own `head` covers every row that committed meanwhile, and the
//! watermark moves to the lower of the two.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};

use outbox_core::store::ClaimOrder;
use outbox_core::OutboxKind;

/// How long a claim from the very start takes, by default, before the
/// claims switch to the watermark: while vacuum keeps up such a claim
/// takes well under it, and claims that scan from the start (returning
/// their window's rows as read) are the cheaper ones; with the horizon held
/// back for minutes it takes several times more (`cargo bench -p
/// outbox-axum --bench vacuum_pressure`).
pub const SLOW_FULL_SCAN: Duration = Duration::from_millis(5);

/// How long a claim from the very start takes for each row it scanned or
/// returned before it counts as slow: while vacuum keeps up, a wide window
/// of a deep backlog costs well under it per row, a cold first claim too
/// (`cargo bench -p outbox-seaorm --bench drain`, the deep backlog); under
/// a held-back horizon a claim steps over every row delivered since, which
/// costs several times it for each row it finds.
pub const SLOW_FULL_SCAN_PER_ROW: Duration = Duration::from_micros(50);

/// How often the oldest-end claim scans from the very start, finding rows
/// below the watermark.
pub(super) const FULL_SCAN_EVERY: Duration = Duration::from_secs(1);

/// How long a candidate waits at least, beyond the end of every
/// transaction running when it was seen.
pub(super) const GRACE: Duration = Duration::from_millis(250);

/// Candidates kept at most; older ones are dropped.
const MAX_CANDIDATES: usize = 64;

/// What one claim statement reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Marks {
    /// The lowest id scanned among rows due since they were written.
    pub(super) head: Option<i64>,
    /// The statement's snapshot: the oldest transaction still running.
    pub(super) xmin: Option<i64>,
    /// The statement's snapshot: the first transaction not yet started.
    pub(super) xmax: Option<i64>,
    /// Whether its scan ended before its limit: it saw every due row from
    /// where it started.
    pub(super) scanned_all: bool,
}

/// What one claim cost: how long it took, and how many rows it scanned or
/// returned (the more).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Cost {
    pub(super) took: Duration,
    pub(super) rows: usize,
}

/// Where a claim scans from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scan {
    /// The very start: finds every due row.
    Full,
    /// Rows due since they were written with ids from this one, and every
    /// rescheduled row.
    Above(i64),
}

#[derive(Clone, Copy, Debug)]
struct Candidate {
    head: i64,
    xmax: i64,
    seen: DateTime<Utc>,
}

#[derive(Debug, Default)]
struct Mark {
    low: Option<i64>,
    candidates: VecDeque<Candidate>,
    last_full: Option<DateTime<Utc>>,
    /// Whether the last claim from the very start was slow (see
    /// [`Watermarks::is_slow`]).
    full_slow: bool,
    /// The highest id a claim returned.
    seen_max: Option<i64>,
}

/// The watermarks of both tables, shared by the clones of one store.
#[derive(Debug)]
pub(super) struct Watermarks {
    region: Mutex<Mark>,
    control: Mutex<Mark>,
    /// From how long a claim from the very start takes the claims scan
    /// from the watermark.
    slow: Duration,
}

impl Default for Watermarks {
    fn default() -> Self {
        Self::new(SLOW_FULL_SCAN)
    }
}

/// What a claim needs to report back: its scan and what was known when it
/// was sent.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sent {
    pub(super) scan: Scan,
    seen_max: Option<i64>,
}

/// Time from `then` to `now` by the claims' clock; none if it went back.
fn elapsed(then: DateTime<Utc>, now: DateTime<Utc>) -> Duration {
    (now - then).to_std().unwrap_or(Duration::ZERO)
}

impl Watermarks {
    /// Watermarks used once a claim from the very start takes `slow`.
    pub(super) fn new(slow: Duration) -> Self {
        Self {
            region: Mutex::default(),
            control: Mutex::default(),
            slow,
        }
    }

    /// The watermark of `kind`: `None` until a candidate held.
    pub(super) fn low(&self, kind: OutboxKind) -> Option<i64> {
        self.mark(kind).low
    }

    fn mark(&self, kind: OutboxKind) -> std::sync::MutexGuard<'_, Mark> {
        let mark = match kind {
            OutboxKind::Region => &self.region,
            OutboxKind::Control => &self.control,
        };
        mark.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Where the next claim of `kind` from `order` scans from.
    pub(super) fn scan(&self, kind: OutboxKind, order: ClaimOrder, now: DateTime<Utc>) -> Sent {
        let mut mark = self.mark(kind);
        let slow = mark.full_slow;
        let scan = match (order, mark.low) {
            (_, None) => Scan::Full,
            // Vacuum keeps up: scanning from the start costs little.
            (_, Some(_)) if !slow => Scan::Full,
            (ClaimOrder::Oldest, Some(_))
                if mark
                    .last_full
                    .is_none_or(|last| elapsed(last, now) >= FULL_SCAN_EVERY) =>
            {
                Scan::Full
            }
            (_, Some(low)) => Scan::Above(low),
        };
        if scan == Scan::Full && order == ClaimOrder::Oldest {
            mark.last_full = Some(now);
        }
        Sent {
            scan,
            seen_max: mark.seen_max,
        }
    }

    /// Whether a claim from the very start that cost `cost` was slow: over
    /// [`SLOW_FULL_SCAN`] (or the store's own) in all and over
    /// [`SLOW_FULL_SCAN_PER_ROW`] a row. Always, with a threshold of zero.
    fn is_slow(&self, cost: Cost) -> bool {
        let per_rows = u32::try_from(cost.rows.max(1))
            .ok()
            .and_then(|rows| SLOW_FULL_SCAN_PER_ROW.checked_mul(rows))
            .unwrap_or(Duration::MAX);
        self.slow.is_zero() || (cost.took >= self.slow && cost.took >= per_rows)
    }

    /// What a claim sent as `sent` reported: `marks`, the highest id it
    /// returned, and what it cost.
    pub(super) fn observe(
        &self,
        kind: OutboxKind,
        sent: Sent,
        marks: Marks,
        returned_max: Option<i64>,
        now: DateTime<Utc>,
        cost: Cost,
    ) {
        let slow = self.is_slow(cost);
        let mut mark = self.mark(kind);
        if sent.scan == Scan::Full && marks.xmin.is_some() {
            // A claim from the oldest end, from the very start.
            mark.full_slow = slow;
        }
        if let Some(max) = returned_max {
            mark.seen_max = Some(mark.seen_max.map_or(max, |seen| seen.max(max)));
        }
        let (Some(xmin), Some(xmax)) = (marks.xmin, marks.xmax) else {
            // The newest-end claim reports nothing: its scan does not reach
            // the lowest due row.
            return;
        };
        // The lowest pending row due since written at or above where this
        // scan started: `head`, or when it found none though it saw every
        // row, beyond every id returned before it was sent (those committed
        // before its snapshot).
        let head = match (marks.head, marks.scanned_all, sent.seen_max) {
            (Some(head), _, _) => Some(head),
            (None, true, Some(seen)) => seen.checked_add(1),
            (None, _, _) => None,
        };
        let Some(head) = head else {
            return;
        };
        while let Some(candidate) = mark.candidates.front().copied() {
            if candidate.xmax > xmin || elapsed(candidate.seen, now) < GRACE {
                break;
            }
            mark.candidates.pop_front();
            let low = candidate.head.min(head);
            if sent.scan == Scan::Full || mark.low.is_some_and(|current| low >= current) {
                // A full scan saw everything: its result stands even when
                // lower (rows made due again below the watermark).
                mark.low = Some(match (sent.scan, mark.low) {
                    (Scan::Above(_), Some(current)) => current.max(low),
                    _ => low,
                });
            }
        }
        if mark.candidates.len() == MAX_CANDIDATES {
            mark.candidates.pop_front();
        }
        mark.candidates.push_back(Candidate {
            head,
            xmax,
            seen: now,
        });
    }
}

impl super::PgStore {
    /// Background claims scan the due index from the watermark (see
    /// [`scan_watermark`](Self::scan_watermark)) once a claim that scans it
    /// from the very start takes `slow` or more (default 5 ms: vacuum
    /// cannot remove what the drain deletes, as while a long transaction
    /// holds its horizon back), and 50 µs or more for each row it scanned
    /// or returned (a deep backlog's wide window takes long without
    /// stepping over anything); `Duration::ZERO`: always.
    pub fn scan_from_watermark_after(mut self, slow: std::time::Duration) -> Self {
        self.watermarks = std::sync::Arc::new(Watermarks::new(slow));
        self
    }

    /// Where this store's background claims of `kind` scan the due index
    /// from: rows due since they were written with ids below it are found
    /// only by the oldest-end claim that scans from the very start, at most
    /// once a second (or with a newer row of their shard); `None` until the
    /// store has proved one (see `claim_due_above.sql`). For operators and
    /// tests: the claims keep it themselves.
    pub fn scan_watermark(&self, kind: OutboxKind) -> Option<i64> {
        self.watermarks.low(kind)
    }
}

/// Where a claim from the very start starts: before any `scheduled_for`
/// the store writes (`due_at_once()` and later).
pub(super) fn scan_start() -> DateTime<Utc> {
    DateTime::<Utc>::UNIX_EPOCH
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIND: OutboxKind = OutboxKind::Region;

    /// A claim that took as long as one under a held-back horizon.
    const SLOWLY: Cost = Cost {
        took: SLOW_FULL_SCAN,
        rows: 1,
    };

    fn d(duration: Duration) -> chrono::Duration {
        chrono::Duration::from_std(duration).unwrap()
    }

    fn marks(head: Option<i64>, xmin: i64, xmax: i64) -> Marks {
        Marks {
            head,
            xmin: Some(xmin),
            xmax: Some(xmax),
            scanned_all: false,
        }
    }

    fn all(head: Option<i64>, xmin: i64, xmax: i64) -> Marks {
        Marks {
            scanned_all: true,
            ..marks(head, xmin, xmax)
        }
    }

    #[test]
    fn claims_scan_from_the_start_until_a_candidate_holds() {
        let marks_of = Watermarks::default();
        let t0 = Utc::now();
        let sent = marks_of.scan(KIND, ClaimOrder::Oldest, t0);
        assert_eq!(sent.scan, Scan::Full);
        // Head 100 while transaction 50 ran (xmax 60).
        marks_of.observe(KIND, sent, marks(Some(100), 50, 60), Some(120), t0, SLOWLY);
        let sent = marks_of.scan(KIND, ClaimOrder::Newest, t0);
        assert_eq!(sent.scan, Scan::Full, "no candidate holds yet");
        // Transaction 50 still runs: the candidate waits.
        let t1 = t0 + d(GRACE);
        marks_of.observe(KIND, sent, marks(Some(90), 50, 70), None, t1, SLOWLY);
        assert_eq!(marks_of.scan(KIND, ClaimOrder::Newest, t1).scan, Scan::Full);
        // It ended, and row 95 (its) committed: the later head covers it.
        let sent = marks_of.scan(KIND, ClaimOrder::Newest, t1);
        marks_of.observe(KIND, sent, marks(Some(95), 60, 80), None, t1, SLOWLY);
        assert_eq!(
            marks_of.scan(KIND, ClaimOrder::Newest, t1).scan,
            Scan::Above(95),
            "the lower of the candidate (100) and the head that saw the commit (95)"
        );
    }

    #[test]
    fn a_candidate_waits_the_grace_even_when_no_transaction_ran() {
        let marks_of = Watermarks::default();
        let t0 = Utc::now();
        let sent = marks_of.scan(KIND, ClaimOrder::Oldest, t0);
        marks_of.observe(KIND, sent, marks(Some(10), 5, 5), None, t0, SLOWLY);
        let sent = marks_of.scan(KIND, ClaimOrder::Newest, t0);
        marks_of.observe(KIND, sent, marks(Some(10), 5, 5), None, t0, SLOWLY);
        assert_eq!(marks_of.scan(KIND, ClaimOrder::Newest, t0).scan, Scan::Full);
        let later = t0 + d(GRACE);
        let sent = marks_of.scan(KIND, ClaimOrder::Newest, later);
        marks_of.observe(KIND, sent, marks(Some(12), 5, 5), None, later, SLOWLY);
        assert_eq!(
            marks_of.scan(KIND, ClaimOrder::Newest, later).scan,
            Scan::Above(10)
        );
    }

    #[test]
    fn the_oldest_end_scans_from_the_start_once_a_second() {
        let marks_of = Watermarks::default();
        let t0 = Utc::now();
        let sent = marks_of.scan(KIND, ClaimOrder::Oldest, t0);
        marks_of.observe(KIND, sent, marks(Some(10), 5, 5), None, t0, SLOWLY);
        let later = t0 + d(GRACE);
        let sent = marks_of.scan(KIND, ClaimOrder::Newest, later);
        marks_of.observe(KIND, sent, marks(Some(10), 5, 5), None, later, SLOWLY);
        assert_eq!(
            marks_of.scan(KIND, ClaimOrder::Oldest, later).scan,
            Scan::Above(10)
        );
        let due = t0 + d(FULL_SCAN_EVERY);
        assert_eq!(
            marks_of.scan(KIND, ClaimOrder::Oldest, due).scan,
            Scan::Full
        );
        assert_eq!(
            marks_of.scan(KIND, ClaimOrder::Oldest, due).scan,
            Scan::Above(10),
            "one full scan per interval"
        );
        assert_eq!(
            marks_of
                .scan(KIND, ClaimOrder::Newest, due + d(FULL_SCAN_EVERY))
                .scan,
            Scan::Above(10),
            "the newest end never scans from the start once a watermark holds"
        );
    }

    #[test]
    fn a_full_scan_lowers_the_watermark_a_bounded_one_never_does() {
        let marks_of = Watermarks::default();
        let t0 = Utc::now();
        let t1 = t0 + d(GRACE);
        let sent = marks_of.scan(KIND, ClaimOrder::Oldest, t0);
        marks_of.observe(KIND, sent, marks(Some(100), 5, 5), None, t0, SLOWLY);
        let sent = marks_of.scan(KIND, ClaimOrder::Newest, t1);
        marks_of.observe(KIND, sent, marks(Some(100), 5, 5), None, t1, SLOWLY);
        assert_eq!(
            marks_of.scan(KIND, ClaimOrder::Newest, t1).scan,
            Scan::Above(100)
        );
        // A bounded scan (from 100) cannot see row 40, made due again.
        let t2 = t1 + d(GRACE);
        let sent = marks_of.scan(KIND, ClaimOrder::Newest, t2);
        assert_eq!(sent.scan, Scan::Above(100));
        marks_of.observe(KIND, sent, marks(Some(100), 6, 6), None, t2, SLOWLY);
        // A full scan sees it and lowers the watermark (once its candidate
        // holds).
        let t3 = t0 + d(FULL_SCAN_EVERY);
        let sent = marks_of.scan(KIND, ClaimOrder::Oldest, t3);
        assert_eq!(sent.scan, Scan::Full);
        marks_of.observe(KIND, sent, marks(Some(40), 7, 7), None, t3, SLOWLY);
        let t4 = t3 + d(FULL_SCAN_EVERY);
        let sent = marks_of.scan(KIND, ClaimOrder::Oldest, t4);
        assert_eq!(sent.scan, Scan::Full);
        marks_of.observe(KIND, sent, marks(Some(40), 7, 7), None, t4, SLOWLY);
        assert_eq!(
            marks_of.scan(KIND, ClaimOrder::Newest, t4).scan,
            Scan::Above(40)
        );
    }

    #[test]
    fn a_scan_that_saw_everything_and_no_fresh_row_moves_past_what_was_returned() {
        let marks_of = Watermarks::default();
        let t0 = Utc::now();
        let sent = marks_of.scan(KIND, ClaimOrder::Oldest, t0);
        marks_of.observe(KIND, sent, marks(Some(10), 5, 5), Some(500), t0, SLOWLY);
        // The backlog delivered: nothing left, and the scan ended early.
        let t1 = t0 + d(GRACE);
        let sent = marks_of.scan(KIND, ClaimOrder::Newest, t1);
        marks_of.observe(KIND, sent, all(None, 6, 6), None, t1, SLOWLY);
        let t2 = t1 + d(GRACE);
        let sent = marks_of.scan(KIND, ClaimOrder::Newest, t2);
        marks_of.observe(KIND, sent, all(None, 7, 7), None, t2, SLOWLY);
        assert_eq!(
            marks_of.scan(KIND, ClaimOrder::Newest, t2).scan,
            Scan::Above(501)
        );
        // A scan cut short by its limit tells nothing without a head.
        let t3 = t2 + d(GRACE);
        let sent = marks_of.scan(KIND, ClaimOrder::Newest, t3);
        marks_of.observe(KIND, sent, marks(None, 8, 8), Some(900), t3, SLOWLY);
        assert_eq!(
            marks_of.scan(KIND, ClaimOrder::Newest, t3).scan,
            Scan::Above(501)
        );
    }

    #[test]
    fn while_a_scan_from_the_start_is_cheap_every_claim_makes_one() {
        let marks_of = Watermarks::default();
        let t0 = Utc::now();
        for at in [t0, t0 + d(GRACE), t0 + d(GRACE) + d(GRACE)] {
            let sent = marks_of.scan(KIND, ClaimOrder::Oldest, at);
            assert_eq!(sent.scan, Scan::Full);
            marks_of.observe(KIND, sent, marks(Some(10), 5, 5), None, at, Cost::default());
        }
        assert_eq!(marks_of.low(KIND), Some(10), "the watermark is kept");
        let at = t0 + d(FULL_SCAN_EVERY) + d(FULL_SCAN_EVERY);
        assert_eq!(marks_of.scan(KIND, ClaimOrder::Newest, at).scan, Scan::Full);
        // Slow once: the claims switch; cheap again: they switch back.
        let sent = marks_of.scan(KIND, ClaimOrder::Oldest, at);
        marks_of.observe(KIND, sent, marks(Some(10), 6, 6), None, at, SLOWLY);
        assert_eq!(
            marks_of.scan(KIND, ClaimOrder::Oldest, at).scan,
            Scan::Above(10)
        );
        let later = at + d(FULL_SCAN_EVERY);
        let sent = marks_of.scan(KIND, ClaimOrder::Oldest, later);
        assert_eq!(sent.scan, Scan::Full);
        marks_of.observe(
            KIND,
            sent,
            marks(Some(10), 7, 7),
            None,
            later,
            Cost::default(),
        );
        assert_eq!(
            marks_of.scan(KIND, ClaimOrder::Oldest, later).scan,
            Scan::Full
        );
    }

    #[test]
    fn a_wide_window_that_takes_long_for_its_rows_is_not_slow() {
        let marks_of = Watermarks::default();
        let t0 = Utc::now();
        let t1 = t0 + d(GRACE);
        // A deep backlog's window: 20,000 rows in 100 ms, 5 µs a row.
        let wide = Cost {
            took: Duration::from_millis(100),
            rows: 20_000,
        };
        for at in [t0, t1] {
            let sent = marks_of.scan(KIND, ClaimOrder::Oldest, at);
            assert_eq!(sent.scan, Scan::Full);
            marks_of.observe(KIND, sent, marks(Some(10), 5, 5), None, at, wide);
        }
        assert_eq!(marks_of.low(KIND), Some(10));
        assert_eq!(marks_of.scan(KIND, ClaimOrder::Oldest, t1).scan, Scan::Full);
        // The same time for 200 rows: stepping over what vacuum left.
        let sent = marks_of.scan(KIND, ClaimOrder::Oldest, t1);
        let stepping = Cost { rows: 200, ..wide };
        marks_of.observe(KIND, sent, marks(Some(10), 6, 6), None, t1, stepping);
        assert_eq!(
            marks_of.scan(KIND, ClaimOrder::Oldest, t1).scan,
            Scan::Above(10)
        );
    }

    #[test]
    fn kinds_keep_their_own_watermark() {
        let marks_of = Watermarks::default();
        let t0 = Utc::now();
        for at in [t0, t0 + d(GRACE)] {
            let sent = marks_of.scan(KIND, ClaimOrder::Oldest, at);
            marks_of.observe(KIND, sent, marks(Some(10), 5, 5), None, at, SLOWLY);
        }
        assert_eq!(
            marks_of
                .scan(OutboxKind::Control, ClaimOrder::Newest, t0 + d(GRACE))
                .scan,
            Scan::Full
        );
    }
}
