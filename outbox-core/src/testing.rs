//! Test utilities: drain everything, as Sentry's `outbox_runner()` does.
//!
//! Enabled by the `test-utils` feature.

use crate::drain::{DrainReport, Drainer, FlushError};
use crate::registry::Category;
use crate::shard::OutboxKind;
use crate::store::StoreError;

/// Rounds [`drain_until_idle`] runs before it gives up: 10.
pub const MAX_ROUNDS: usize = 10;

/// Why [`drain_until_idle`] stopped before the outbox was empty of due rows.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunnerError {
    /// Receivers kept writing new outbox rows for [`MAX_ROUNDS`] rounds.
    #[error(
        "outbox rows were still due after {rounds} drain rounds: receivers keep writing \
         outboxes (a cascade that does not end?)"
    )]
    RecursionLimit {
        /// Rounds run.
        rounds: usize,
    },
    /// A delivery failed.
    #[error(transparent)]
    Flush(#[from] FlushError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Drains every due row of `kinds`, round after round, until nothing is due.
///
/// Each round delivers the rows that existed when it started; rows written by
/// receivers during a round (a cascade) are delivered by the next. After
/// [`MAX_ROUNDS`] rounds with rows still due it returns
/// [`RunnerError::RecursionLimit`]. The first failed delivery is returned as a
/// [`FlushError`] naming the category, the shard and the receiver's error.
///
/// # Errors
///
/// See [`RunnerError`].
pub async fn drain_until_idle<C: Category>(
    drainer: &Drainer<C>,
    kinds: &[OutboxKind],
) -> Result<DrainReport, RunnerError> {
    let mut total = DrainReport::default();
    for _round in 0..MAX_ROUNDS {
        let mut worked = false;
        for &kind in kinds {
            let Some(bound) = drainer.store().max_id(kind).await? else {
                continue;
            };
            loop {
                let mut report = drainer.drain_due_up_to(kind, Some(bound)).await?;
                if let Some(failure) = report.failures.pop() {
                    return Err(FlushError::from_failure(failure).into());
                }
                if report.is_empty() {
                    break;
                }
                worked = true;
                total.absorb(report);
            }
        }
        if !worked {
            return Ok(total);
        }
    }
    for &kind in kinds {
        if drainer.store().has_due(kind, drainer.now()).await? {
            return Err(RunnerError::RecursionLimit { rounds: MAX_ROUNDS });
        }
    }
    Ok(total)
}

/// One delivery as a [`Recorder`] saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery<C> {
    /// The shard.
    pub shard: crate::ShardKey,
    /// The category.
    pub category: C,
    /// The object.
    pub object: i64,
    /// The delivered row id.
    pub id: i64,
    /// The lowest id of the delivered group.
    pub first_id: i64,
    /// Rows acknowledged by the delivery.
    pub coalesced: usize,
    /// The payload.
    pub payload: Option<serde_json::Value>,
    /// Whether it was a synchronous flush.
    pub synchronous: bool,
}

type FailRule<C> = std::sync::Arc<dyn Fn(&crate::Message<C>) -> bool + Send + Sync>;

/// A receiver for tests: records every delivery, fails on demand, and counts
/// deliveries of one shard that overlap in time (two workers at once).
pub struct Recorder<C: Category> {
    deliveries: std::sync::Arc<std::sync::Mutex<Vec<Delivery<C>>>>,
    active: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<crate::ShardKey>>>,
    overlaps: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    fail: std::sync::Arc<std::sync::Mutex<Option<FailRule<C>>>>,
    yield_inside: std::sync::Arc<std::sync::atomic::AtomicBool>,
    delivered: std::sync::Arc<tokio::sync::Notify>,
}

impl<C: Category> Clone for Recorder<C> {
    fn clone(&self) -> Self {
        Self {
            deliveries: self.deliveries.clone(),
            active: self.active.clone(),
            overlaps: self.overlaps.clone(),
            calls: self.calls.clone(),
            fail: self.fail.clone(),
            yield_inside: self.yield_inside.clone(),
            delivered: self.delivered.clone(),
        }
    }
}

impl<C: Category> Default for Recorder<C> {
    fn default() -> Self {
        Self {
            deliveries: Default::default(),
            active: Default::default(),
            overlaps: Default::default(),
            calls: Default::default(),
            fail: Default::default(),
            yield_inside: Default::default(),
            delivered: Default::default(),
        }
    }
}

impl<C: Category> std::fmt::Debug for Recorder<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("deliveries", &self.deliveries().len())
            .finish_non_exhaustive()
    }
}

impl<C: Category> Recorder<C> {
    /// A recorder that accepts everything.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fails every message for which `rule` holds.
    pub fn fail_when(&self, rule: impl Fn(&crate::Message<C>) -> bool + Send + Sync + 'static) {
        *self.fail.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::sync::Arc::new(rule));
    }

    /// Stops failing.
    pub fn stop_failing(&self) {
        *self.fail.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Yields to the scheduler inside each delivery, to widen race windows.
    pub fn yield_inside(&self, yield_inside: bool) {
        self.yield_inside
            .store(yield_inside, std::sync::atomic::Ordering::Relaxed);
    }

    /// Successful deliveries so far, in order.
    pub fn deliveries(&self) -> Vec<Delivery<C>> {
        self.deliveries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Receiver calls so far, failed ones included.
    pub fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Times one shard was delivered by two callers at once (must stay 0).
    pub fn overlaps(&self) -> usize {
        self.overlaps.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until at least `count` deliveries were recorded, or `timeout`.
    /// Returns whether they were.
    pub async fn wait_for(&self, count: usize, timeout: std::time::Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.delivered.notified();
                if self
                    .deliveries
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .len()
                    >= count
                {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }

    /// Handles one message.
    ///
    /// # Errors
    ///
    /// When the fail rule holds for the message.
    pub async fn handle(&self, message: crate::Message<C>) -> Result<(), crate::HandlerError> {
        use std::sync::atomic::Ordering;
        self.calls.fetch_add(1, Ordering::SeqCst);
        if !self
            .active
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(message.shard.clone())
        {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        if self.yield_inside.load(Ordering::Relaxed) {
            tokio::task::yield_now().await;
        }
        let fail = self.fail.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let result = if fail.is_some_and(|rule| rule(&message)) {
            Err(format!("receiver refused {}", message.id).into())
        } else {
            self.deliveries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Delivery {
                    shard: message.shard.clone(),
                    category: message.category,
                    object: message.object_identifier,
                    id: message.id,
                    first_id: message.first_id,
                    coalesced: message.coalesced,
                    payload: message.payload.clone(),
                    synchronous: message.synchronous,
                });
            self.delivered.notify_waiters();
            Ok(())
        };
        self.active
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&message.shard);
        result
    }

    /// Receivers for every live category, all into this recorder.
    pub fn receivers(&self) -> crate::Receivers<C> {
        let mut receivers = crate::Receivers::new();
        for &category in C::ALL {
            if category.is_retired() {
                continue;
            }
            let recorder = self.clone();
            receivers.register(category, move |message| {
                let recorder = recorder.clone();
                async move { recorder.handle(message).await }
            });
        }
        receivers
    }
}
