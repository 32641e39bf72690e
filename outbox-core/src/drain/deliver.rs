//! Delivering one claimed shard: decides its [`ShardOutcome`], applies
//! nothing. The round commits the outcomes.

use std::sync::Arc;

use super::call::{call_one, prepare, Call};
use super::claim::to_chrono;
use super::engine::Engine;
use super::lease::LeaseEnd;
use super::observe;
use super::report::{DeliveryError, ShardFailure};
use crate::coalesce::{coalesce, CoalescingGroup};
use crate::control::ControlAction;
use crate::fence_token::FencingToken;
use crate::registry::Category;
use crate::shard::ShardKey;
use crate::store::{ClaimedShard, DeadLetter, ShardCommit, ShardEnd, ShardState};

/// The last error of a shard parked by a pause.
pub(crate) const PAUSED: &str = "paused by an operator";

/// What delivering one shard decided.
#[derive(Debug)]
pub(crate) struct ShardOutcome {
    /// What to commit for it.
    pub(crate) commit: ShardCommit,
    /// Delivered groups: category name and rows acknowledged.
    pub(crate) delivered: Vec<(&'static str, usize)>,
    /// Rows culled by an operator's control.
    pub(crate) culled: usize,
    /// Failed deliveries (dead-lettered ones included).
    pub(crate) failures: Vec<ShardFailure>,
    /// The shard was backing off and left alone.
    pub(crate) backing_off: bool,
    /// Its lease ended by this process's clock before it was delivered in
    /// full: the rest was not sent.
    pub(crate) gave_up: bool,
}

impl ShardOutcome {
    fn new(shard: ShardKey, end: ShardEnd) -> Self {
        Self {
            commit: ShardCommit {
                shard,
                delete_ids: Vec::new(),
                dead_letters: Vec::new(),
                end,
            },
            delivered: Vec::new(),
            culled: 0,
            failures: Vec::new(),
            backing_off: false,
            gave_up: false,
        }
    }

    /// A shard left as it was: nothing delivered, nothing deleted.
    pub(crate) fn untouched(shard: ShardKey) -> Self {
        Self::new(shard, ShardEnd::Done)
    }

    /// A shard that backs off until its `retry_at`: nothing delivered, new
    /// rows rescheduled to it.
    pub(crate) fn waiting(shard: ShardKey, state: &ShardState) -> Self {
        let mut outcome = Self::new(
            shard,
            ShardEnd::Wait {
                retry_at: state.retry_at,
            },
        );
        outcome.backing_off = true;
        outcome
    }
}

/// Whether `claimed` must be left alone now: it backs off after a failure.
pub(crate) fn is_backing_off<C: Category>(drainer: &Engine<C>, claimed: &ClaimedShard) -> bool {
    claimed
        .state
        .as_ref()
        .is_some_and(|state| state.retry_at > drainer.now())
}

/// Delivers a claimed shard's rows in order, stopping at the first failure
/// that its scope does not dead-letter.
pub(crate) async fn deliver_shard<C: Category>(
    drainer: &Engine<C>,
    claimed: ClaimedShard,
    lease: &LeaseEnd,
    synchronous: bool,
    stack: Arc<Vec<ShardKey>>,
) -> ShardOutcome {
    let mut run = match ShardRun::start(drainer, claimed, synchronous, &stack) {
        Started::Run(run) => *run,
        Started::Decided(outcome) => return outcome,
    };
    while let Some(next) = run.next(drainer, lease) {
        let result = match next {
            Ok(call) => call_one(drainer, call).await,
            Err(error) => Err(error),
        };
        run.record(drainer, result);
    }
    run.finish(drainer)
}

/// A shard being delivered, one coalescing group after the other: what
/// [`deliver_shard`] steps through, and what a wave of batch deliveries
/// (`drain::wave`) steps through for many shards at once. It decides
/// everything but the calls themselves.
pub(crate) struct ShardRun<C: Category> {
    outcome: ShardOutcome,
    groups: std::vec::IntoIter<CoalescingGroup>,
    /// The group whose call is out (between `next` and `record`).
    current: Option<CoalescingGroup>,
    fence: FencingToken,
    had_state: bool,
    attempts: u32,
    last_backoff: Option<std::time::Duration>,
    dead_lettered_any: bool,
    retrying: bool,
    synchronous: bool,
    /// The shards being delivered on this task, this one last.
    stack: Arc<Vec<ShardKey>>,
    /// No call is left: the outcome is decided.
    ended: bool,
    _category: std::marker::PhantomData<C>,
}

/// A shard's run, or its outcome when nothing is to be called.
pub(crate) enum Started<C: Category> {
    Run(Box<ShardRun<C>>),
    Decided(ShardOutcome),
}

impl<C: Category> ShardRun<C> {
    /// Starts delivering `claimed`, or decides it at once (no rows, or an
    /// operator's cull or pause).
    pub(crate) fn start(
        drainer: &Engine<C>,
        claimed: ClaimedShard,
        synchronous: bool,
        stack: &Arc<Vec<ShardKey>>,
    ) -> Started<C> {
        let ClaimedShard {
            shard,
            rows,
            state,
            fence,
        } = claimed;
        let recovered_end = if state.is_some() {
            ShardEnd::Recovered
        } else {
            ShardEnd::Done
        };
        let mut outcome = ShardOutcome::new(shard.clone(), recovered_end);
        if rows.is_empty() {
            return Started::Decided(outcome);
        }
        let groups = coalesce(rows, |category| {
            C::try_from(category).map_or(true, |category| category.coalesces())
        });
        let attempts = state.as_ref().map_or(0, |s| s.attempts);
        let last_backoff = state.as_ref().and_then(|s| s.last_backoff);

        if let Some(action) = drainer.controls().action_for(&shard) {
            controlled(&mut outcome, action, &groups, attempts, last_backoff);
            return Started::Decided(outcome);
        }
        let stack = Arc::new({
            let mut stack = Vec::clone(stack);
            stack.push(shard);
            stack
        });
        Started::Run(Box::new(Self {
            outcome,
            groups: groups.into_iter(),
            current: None,
            fence,
            had_state: state.is_some(),
            attempts,
            last_backoff,
            dead_lettered_any: false,
            retrying: attempts > 0,
            synchronous,
            stack,
            ended: false,
            _category: std::marker::PhantomData,
        }))
    }

    /// The shard.
    pub(crate) fn shard(&self) -> &ShardKey {
        &self.outcome.commit.shard
    }

    /// The next call to make, `Err` for a group that cannot be delivered
    /// (an unknown category, no receiver: pass it to [`record`](Self::record)
    /// as is), or `None` when the shard is done.
    pub(crate) fn next(
        &mut self,
        drainer: &Engine<C>,
        lease: &LeaseEnd,
    ) -> Option<Result<Call<C>, DeliveryError>> {
        if self.ended {
            return None;
        }
        let Some(mut group) = self.groups.next() else {
            self.ended = true;
            return None;
        };
        if !lease.allows_call(drainer.now(), drainer.config().lease_margin()) {
            // Rule 12, the sender's half: the lease ended by this process's
            // clock (it was paused, or starved, past it), so another worker
            // may hold the shard and deliver newer rows. Nothing more is
            // called; what was delivered is committed if the lease is still
            // live, and the rest waits for the next claim.
            observe::claims_lost(self.shard().kind(), 1, "the lease ended before a delivery");
            if self.outcome.delivered.is_empty() && !self.dead_lettered_any {
                self.outcome.commit.end = ShardEnd::Done;
            }
            self.outcome.gave_up = true;
            self.ended = true;
            return None;
        }
        let call = prepare(
            drainer,
            &mut group,
            self.fence,
            self.synchronous,
            &self.stack,
        );
        self.current = Some(group);
        Some(call)
    }

    /// Records the result of the call [`next`](Self::next) handed out.
    pub(crate) fn record(&mut self, drainer: &Engine<C>, result: Result<C, DeliveryError>) {
        let Some(group) = self.current.take() else {
            return;
        };
        match result {
            Ok(category) => self.delivered(drainer, &group, category),
            Err(error) => self.failed(drainer, &group, error),
        }
    }

    fn delivered(&mut self, drainer: &Engine<C>, group: &CoalescingGroup, category: C) {
        let shard = self.shard();
        observe::delivered_group(
            category.name(),
            shard.kind(),
            self.synchronous,
            group.ids.len(),
            self.retrying,
        );
        drainer.recovery().succeeded(group.category(), shard);
        self.retrying = false;
        self.outcome.commit.delete_ids.extend_from_slice(&group.ids);
        self.outcome
            .delivered
            .push((category.name(), group.ids.len()));
    }

    /// A failed group: dead-lettered where its scope allows it (after its
    /// attempts, or at once for a permanent error), the shard quarantined
    /// for a permanent error otherwise, rescheduled with backoff for any
    /// other.
    fn failed(&mut self, drainer: &Engine<C>, group: &CoalescingGroup, error: DeliveryError) {
        if error.unknown_version().is_some() {
            return self.park(drainer, group, error);
        }
        self.attempts = self.attempts.saturating_add(1);
        self.retrying = true;
        let shard = self.shard().clone();
        let category_name = C::try_from(group.category()).ok().map(|c| c.name());
        observe::delivery_failed(&shard, category_name, self.synchronous, &error);
        let policy = drainer.dead_letter_policy().attempts_for(shard.scope());
        let dead_letter = policy.is_some_and(|max| self.attempts >= max || error.is_permanent());
        let failed = Failed {
            shard: &shard,
            group,
            category_name,
        };
        if dead_letter {
            self.dead_letter(drainer, failed, error);
        } else if error.is_permanent() {
            self.quarantine(drainer, failed, error);
        } else {
            self.reschedule(drainer, failed, error);
        }
    }

    /// The scope gives up on this group: moved aside, and the shard goes on,
    /// healthy again.
    fn dead_letter(&mut self, drainer: &Engine<C>, failed: Failed<'_>, error: DeliveryError) {
        observe::dead_lettered(
            failed.shard,
            failed.group,
            failed.category_name,
            self.attempts,
            &error,
        );
        self.outcome.commit.dead_letters.push(DeadLetter {
            ids: failed.group.ids.clone(),
            error: error.to_string(),
        });
        self.outcome
            .failures
            .push(failed.failure(drainer.now(), true, error));
        self.attempts = 0;
        self.last_backoff = None;
        self.dead_lettered_any = true;
    }

    /// A permanent error where the scope keeps no dead letters: the shard
    /// waits for an operator.
    fn quarantine(&mut self, drainer: &Engine<C>, failed: Failed<'_>, error: DeliveryError) {
        observe::quarantined(failed.shard, failed.group, failed.category_name, &error);
        let retry_at = crate::schedule::quarantined_until();
        self.outcome.commit.end = ShardEnd::Backoff {
            retry_at,
            delay: self
                .last_backoff
                .unwrap_or(drainer.config().backoff.initial()),
            error: error.to_string(),
            attempts: self.attempts,
        };
        self.outcome
            .failures
            .push(failed.failure(retry_at, false, error));
        self.ended = true;
    }

    /// A payload version the receiver does not know: not a failure of the
    /// message or the receiver, but a producer deployed ahead of it. The
    /// shard waits the park interval, always the same: no attempt is
    /// counted, its backoff does not grow, and nothing is dead-lettered
    /// or quarantined, so that it delivers soon after the receiver that
    /// knows the version is deployed.
    fn park(&mut self, drainer: &Engine<C>, group: &CoalescingGroup, error: DeliveryError) {
        let shard = self.shard().clone();
        let retry_at = drainer.now() + to_chrono(drainer.config().park_interval);
        if let Some(unknown) = error.unknown_version() {
            observe::parked(&shard, group, unknown, retry_at);
        }
        let failed = Failed {
            shard: &shard,
            group,
            category_name: C::try_from(group.category()).ok().map(|c| c.name()),
        };
        self.outcome.commit.end = ShardEnd::Backoff {
            retry_at,
            delay: self
                .last_backoff
                .unwrap_or(drainer.config().backoff.initial()),
            error: format!("{}{error}", crate::registry::contract::PARKED),
            attempts: self.attempts,
        };
        self.outcome
            .failures
            .push(failed.failure(retry_at, false, error));
        self.ended = true;
    }

    /// Any other failure: the shard backs off, and is retried as a whole.
    fn reschedule(&mut self, drainer: &Engine<C>, failed: Failed<'_>, error: DeliveryError) {
        drainer
            .recovery()
            .backed_off(failed.group.category(), failed.shard);
        let end = backoff_end(drainer, self.last_backoff, &error, self.attempts);
        let retry_at = match &end {
            ShardEnd::Backoff { retry_at, .. } => *retry_at,
            _ => drainer.now(),
        };
        tracing::warn!(
            shard = %failed.shard,
            id = failed.group.newest.id,
            category = failed.category_name.unwrap_or("unknown"),
            attempts = self.attempts,
            %retry_at,
            error = %error,
            "outbox delivery failed; shard rescheduled"
        );
        self.outcome
            .failures
            .push(failed.failure(retry_at, false, error));
        self.outcome.commit.end = end;
        self.ended = true;
    }

    /// The shard's outcome, once [`next`](Self::next) returned `None`.
    pub(crate) fn finish(mut self, drainer: &Engine<C>) -> ShardOutcome {
        if !self.outcome.gave_up && self.outcome.failures.iter().all(|f| f.dead_lettered) {
            // A dead-lettered group started the shard's failure count over:
            // a state row, if any, goes; the shard is healthy.
            if self.dead_lettered_any && self.had_state {
                self.outcome.commit.end = ShardEnd::Recovered;
            }
            if self.outcome.commit.end == ShardEnd::Recovered {
                drainer.recovery().recovered(self.shard());
            }
        }
        self.outcome
    }
}

/// An operator's control decides the shard: a cull drops its rows (none is
/// delivered), a pause parks it (claims pass it by until it is lifted).
fn controlled(
    outcome: &mut ShardOutcome,
    action: ControlAction,
    groups: &[CoalescingGroup],
    attempts: u32,
    last_backoff: Option<std::time::Duration>,
) {
    let shard = &outcome.commit.shard;
    match action {
        ControlAction::Cull => {
            for group in groups {
                outcome.commit.delete_ids.extend_from_slice(&group.ids);
                outcome.culled += group.ids.len();
            }
            tracing::info!(%shard, culled = outcome.culled, "outbox shard culled by an operator");
        }
        ControlAction::Pause => {
            tracing::info!(%shard, "outbox shard paused by an operator: parked");
            outcome.commit.end = ShardEnd::Backoff {
                retry_at: crate::schedule::paused_until(),
                delay: last_backoff.unwrap_or_default(),
                error: PAUSED.to_owned(),
                attempts,
            };
        }
    }
}

/// A group whose delivery failed, and where it belongs.
struct Failed<'a> {
    shard: &'a ShardKey,
    group: &'a CoalescingGroup,
    category_name: Option<&'static str>,
}

impl Failed<'_> {
    fn failure(
        &self,
        retry_at: chrono::DateTime<chrono::Utc>,
        dead_lettered: bool,
        error: DeliveryError,
    ) -> ShardFailure {
        ShardFailure {
            shard: self.shard.clone(),
            id: self.group.newest.id,
            category: self.group.category(),
            category_name: self.category_name,
            object_identifier: self.group.object_identifier(),
            retry_at,
            dead_lettered,
            error,
        }
    }
}

fn backoff_end<C: Category>(
    drainer: &Engine<C>,
    last_backoff: Option<std::time::Duration>,
    error: &DeliveryError,
    attempts: u32,
) -> ShardEnd {
    let backoff = drainer.config().backoff;
    let mut delay = backoff.next_delay(last_backoff);
    // A receiver that asked for a delay (`retry_after`) gets at least that,
    // up to the cap.
    if let DeliveryError::Handler(handler) = error {
        if let Some(asked) = crate::receiver::requested_retry_after(handler.as_ref()) {
            delay = delay.max(asked.min(backoff.max()));
        }
    }
    ShardEnd::Backoff {
        retry_at: drainer.now() + to_chrono(delay),
        delay,
        error: error.to_string(),
        attempts,
    }
}
