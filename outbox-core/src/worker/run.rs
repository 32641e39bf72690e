//! The worker's tasks: a drain loop per kind and the wake-up listener.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch, Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::gather;
use super::wake::{WakeSource, Waker, Wakeup};
use crate::drain::Drainer;
use crate::registry::Category;
use crate::shard::OutboxKind;

/// The first delay after a failed round or a lost wake-up source: 100 ms.
const FIRST_ERROR_DELAY: Duration = Duration::from_millis(100);
/// The longest delay between retries: 30 s.
const MAX_ERROR_DELAY: Duration = Duration::from_secs(30);

/// What the loops of one worker share.
#[derive(Clone)]
pub(super) struct Shared<C: Category> {
    pub(super) drainer: Drainer<C>,
    pub(super) waker: Waker,
    pub(super) poll_interval: Duration,
    /// The gather window under load (see `gather.rs`).
    pub(super) gather: Duration,
    /// Stops claiming (graceful shutdown).
    pub(super) stop: CancellationToken,
    /// Cancels rounds in flight (shutdown cut off at its bound).
    pub(super) cut_off: CancellationToken,
    pub(super) rounds: TaskTracker,
    pub(super) ready: Arc<watch::Sender<usize>>,
    /// Rounds started and not ended yet, in every loop.
    pub(super) in_flight: Arc<watch::Sender<usize>>,
}

/// Counts a round in flight for as long as it lives.
struct InFlight(Arc<watch::Sender<usize>>);

impl InFlight {
    fn start(counter: &Arc<watch::Sender<usize>>) -> Self {
        counter.send_modify(|count| *count += 1);
        Self(counter.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|count| *count = count.saturating_sub(1));
    }
}

impl<C: Category> Shared<C> {
    fn announce(&self, announced: &mut bool) {
        if !*announced {
            *announced = true;
            self.ready.send_modify(|count| *count += 1);
        }
    }

    /// Sleeps `delay` unless the worker stops first.
    async fn pause(&self, delay: Duration) {
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = self.stop.cancelled() => {}
        }
    }
}

/// Claims round after round of `kind`. Once a round's claim has answered
/// that more may be due, the next one starts while it delivers (at most
/// `rounds_in_flight` at once), never beside a claim still reading: two
/// claims of one loop at once would read the same rows and buckets, and
/// the second would lease none of those the first leases (each claim
/// scans past the rows of the rounds in flight instead, see
/// `drain::held`); when the claim took everything due, the
/// loop sleeps until woken (rows committed meanwhile wake it, and so does
/// the end of a round that was in flight as the claim began) or until its
/// poll interval has passed, and after a claim of several shards a wake-up
/// waits out the gather window (`gather.rs`).
pub(super) async fn drain_loop<C: Category>(
    shared: Shared<C>,
    kind: OutboxKind,
    rounds_in_flight: Arc<Semaphore>,
) {
    let _draining = shared.waker.draining(kind);
    // Every round of this loop says here when it has ended (see the sleep
    // below).
    let round_ended = Arc::new(Notify::new());
    let rounds_at_most = rounds_in_flight.available_permits();
    let mut error_delay = FIRST_ERROR_DELAY;
    let mut announced = false;
    loop {
        if shared.stop.is_cancelled() {
            return;
        }
        if shared.drainer.has_abandoned() {
            if let Err(error) = shared.drainer.release_abandoned().await {
                tracing::warn!(%error, "could not release the claims of cancelled outbox rounds; retrying before the next round");
            }
        }
        // Registered before the round, so a wake-up during it is not lost.
        let notified = shared.waker.notified(kind);
        tokio::pin!(notified);
        notified.as_mut().enable();
        let ended = round_ended.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        // Rounds still delivering hold buckets this claim will pass over.
        let others_in_flight = rounds_in_flight.available_permits() < rounds_at_most;
        let permit = tokio::select! {
            permit = rounds_in_flight.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_closed) => return,
            },
            () = shared.stop.cancelled() => return,
        };
        let (started, claim_answer) = oneshot::channel();
        let claim_started = tokio::time::Instant::now();
        let drainer = shared.drainer.clone();
        let cut_off = shared.cut_off.clone();
        let ended_here = round_ended.clone();
        let in_flight = InFlight::start(&shared.in_flight);
        shared.rounds.spawn(async move {
            let _permit = permit;
            let _in_flight = in_flight;
            tokio::select! {
                result = drainer.round_due(kind, None, Some(started)) => match result {
                    // It held buckets, and has released them.
                    Ok(report) if report.shards > 0 => ended_here.notify_waiters(),
                    Ok(_) => {}
                    Err(error) => {
                        tracing::warn!(%error, kind = kind.as_str(), "outbox drain round failed");
                    }
                },
                // Dropping the round files its claims for release.
                () = cut_off.cancelled() => {}
            }
        });
        // The claim answers once its statement returns; a worker told to
        // stop meanwhile stops claiming (the round ends on its own, within
        // the shutdown's bound).
        let answer = tokio::select! {
            answer = claim_answer => answer,
            () = shared.stop.cancelled() => return,
        };
        let (wait, gathered) = match answer {
            Ok(Ok(answer)) if answer.more => {
                error_delay = FIRST_ERROR_DELAY;
                continue;
            }
            Ok(Ok(answer)) => {
                // Everything due was taken: the next claim waits for new
                // rows (their wake-up) rather than find nothing now.
                error_delay = FIRST_ERROR_DELAY;
                (
                    shared.poll_interval,
                    gather::next_claim(claim_started, answer.shards, shared.gather),
                )
            }
            Ok(Err(_)) | Err(_) => {
                tracing::debug!(kind = kind.as_str(), retry_in = ?error_delay, "retrying the outbox drain after a failed round");
                shared.pause(error_delay).await;
                error_delay = (error_delay * 2).min(MAX_ERROR_DELAY);
                continue;
            }
        };
        shared.announce(&mut announced);
        // Woken by new rows, or, when other rounds were in flight as the
        // claim began, by the end of a round (since the claim began: the
        // future was registered then): the claim found nothing more among
        // the buckets it could take, but rows due in buckets those rounds
        // held were passed over, and a round whose own claim took
        // everything it saw wakes nobody when it releases them (they then
        // waited for the poll interval: a second, under a backlog).
        let woken = tokio::select! {
            () = &mut notified => true,
            () = &mut ended, if others_in_flight => true,
            () = tokio::time::sleep(wait) => false,
            () = shared.stop.cancelled() => false,
        };
        if let (true, Some(at)) = (woken, gathered) {
            tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = shared.stop.cancelled() => {}
            }
        }
    }
}

/// Keeps the backlog gauges of `kinds` up to date (see [`crate::metrics`])
/// and records their history samples (see [`crate::history`]):
/// now, then every `interval`, until the worker stops.
pub(super) async fn gauge_loop<C: Category>(
    shared: Shared<C>,
    kinds: Vec<OutboxKind>,
    interval: Duration,
    history: Option<Duration>,
) {
    let mut announced = false;
    loop {
        for &kind in &kinds {
            match shared.drainer.view().backlog(kind).await {
                Ok(backlog) => {
                    backlog.publish();
                    if let Some(retention) = history {
                        let engine = shared.drainer.engine();
                        if let Err(error) =
                            engine.record_history(&backlog, interval, retention).await
                        {
                            tracing::debug!(%error, kind = kind.as_str(), "could not record the outbox history; the next sample tries again");
                        }
                    }
                }
                Err(error) => {
                    tracing::debug!(%error, kind = kind.as_str(), "could not measure the outbox backlog; the gauges keep their last values");
                }
            }
        }
        shared.announce(&mut announced);
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = shared.stop.cancelled() => return,
        }
    }
}

/// Turns wake-ups from other processes into local ones. When the source
/// fails, the drains go on polling: said once at `WARN`, then quietly
/// retried with growing delays until the source is back.
pub(super) async fn wake_loop<C: Category>(shared: Shared<C>, mut source: Box<dyn WakeSource>) {
    let mut error_delay = FIRST_ERROR_DELAY;
    let mut announced = false;
    let mut degraded = false;
    loop {
        let next = tokio::select! {
            next = source.next() => next,
            () = shared.stop.cancelled() => return,
        };
        match next {
            Ok(Wakeup::Rows(kind)) => shared.waker.wake_local(kind),
            Ok(Wakeup::Resync) => {
                error_delay = FIRST_ERROR_DELAY;
                if degraded {
                    degraded = false;
                    tracing::info!("outbox wake-up notifications are back");
                }
                shared.announce(&mut announced);
                for kind in OutboxKind::ALL {
                    shared.waker.wake_local(kind);
                }
            }
            Err(error) => {
                if degraded {
                    tracing::debug!(%error, retry_in = ?error_delay, "outbox wake-up notifications still unavailable");
                } else {
                    degraded = true;
                    tracing::warn!(
                        %error,
                        poll_interval = ?shared.poll_interval,
                        "outbox wake-up notifications are unavailable; the drain polls instead until they are back"
                    );
                }
                // Polling is a working mode: the worker is ready.
                shared.announce(&mut announced);
                shared.pause(error_delay).await;
                error_delay = (error_delay * 2).min(MAX_ERROR_DELAY);
            }
        }
    }
}
