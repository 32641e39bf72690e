//! A receiver that records what it is given, and a gate to hold it at.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use outbox_core::registry::Category;
use outbox_core::shard::ShardKey;
use tokio::sync::Notify;

/// One delivery as a [`Recorder`] saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery<C> {
    /// The shard.
    pub shard: ShardKey,
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
    /// The trace context of the span that wrote the delivered row.
    pub traceparent: Option<outbox_core::trace::TraceParent>,
    /// The message id of the delivered row.
    pub message_id: uuid::Uuid,
    /// The payload version the delivered row's writer stored.
    pub payload_version: Option<u32>,
    /// The fencing token of the claim that delivered it.
    pub fence: outbox_core::FencingToken,
}

type Rule<C> = Arc<dyn Fn(&outbox_core::Message<C>) -> bool + Send + Sync>;

/// A receiver for tests: records every delivery, fails or holds deliveries on
/// demand, and counts deliveries of one shard that overlap in time (two
/// workers at once, which rule 3 forbids).
pub struct Recorder<C: Category> {
    inner: Arc<RecorderInner<C>>,
}

struct RecorderInner<C: Category> {
    deliveries: Mutex<Vec<Delivery<C>>>,
    active: Mutex<HashSet<ShardKey>>,
    overlaps: AtomicUsize,
    calls: AtomicUsize,
    fail: Mutex<Option<Rule<C>>>,
    /// Whether failures are permanent ([`outbox_core::permanent`]).
    permanent: AtomicBool,
    hold: Mutex<Option<(Rule<C>, Gate)>>,
    yield_inside: AtomicBool,
    delivered: Notify,
    /// The shards of each batch call, in call order.
    batches: Mutex<Vec<Vec<ShardKey>>>,
}

impl<C: Category> Clone for Recorder<C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<C: Category> Default for Recorder<C> {
    fn default() -> Self {
        Self {
            inner: Arc::new(RecorderInner {
                deliveries: Mutex::default(),
                active: Mutex::default(),
                overlaps: AtomicUsize::new(0),
                calls: AtomicUsize::new(0),
                fail: Mutex::default(),
                permanent: AtomicBool::new(false),
                hold: Mutex::default(),
                yield_inside: AtomicBool::new(false),
                delivered: Notify::new(),
                batches: Mutex::default(),
            }),
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

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// A gate that held deliveries wait at (see [`Recorder::hold_when`]).
/// Clones share the gate.
#[derive(Clone, Debug, Default)]
pub struct Gate {
    inner: Arc<GateInner>,
}

#[derive(Debug, Default)]
struct GateInner {
    waiting: AtomicUsize,
    arrived: Notify,
    open: AtomicBool,
    opened: Notify,
}

impl Gate {
    /// Waits until at least `count` deliveries have reached the gate (in
    /// total, whether or not they have passed it since).
    pub async fn reached(&self, count: usize) {
        loop {
            let arrived = self.inner.arrived.notified();
            if self.inner.waiting.load(Ordering::SeqCst) >= count {
                return;
            }
            arrived.await;
        }
    }

    /// Lets every held delivery through, now and later.
    pub fn open(&self) {
        self.inner.open.store(true, Ordering::SeqCst);
        self.inner.opened.notify_waiters();
    }

    async fn pass(&self) {
        let opened = self.inner.opened.notified();
        tokio::pin!(opened);
        opened.as_mut().enable();
        self.inner.waiting.fetch_add(1, Ordering::SeqCst);
        self.inner.arrived.notify_waiters();
        if !self.inner.open.load(Ordering::SeqCst) {
            opened.await;
        }
    }
}

/// Removes a shard from the active set when its delivery ends, even when the
/// delivery is cancelled half-way.
struct Active<'a> {
    set: &'a Mutex<HashSet<ShardKey>>,
    shard: ShardKey,
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        lock(self.set).remove(&self.shard);
    }
}

impl<C: Category> Recorder<C> {
    /// A recorder that accepts everything.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fails every message for which `rule` holds.
    pub fn fail_when(
        &self,
        rule: impl Fn(&outbox_core::Message<C>) -> bool + Send + Sync + 'static,
    ) {
        self.inner.permanent.store(false, Ordering::SeqCst);
        *lock(&self.inner.fail) = Some(Arc::new(rule));
    }

    /// Fails every message for which `rule` holds with a
    /// [`permanent`](outbox_core::permanent) error.
    pub fn fail_permanently_when(
        &self,
        rule: impl Fn(&outbox_core::Message<C>) -> bool + Send + Sync + 'static,
    ) {
        self.inner.permanent.store(true, Ordering::SeqCst);
        *lock(&self.inner.fail) = Some(Arc::new(rule));
    }

    /// Stops failing.
    pub fn stop_failing(&self) {
        *lock(&self.inner.fail) = None;
    }

    /// Holds every message for which `rule` holds at the returned gate until
    /// it is opened (a receiver that hangs, or a crash point).
    pub fn hold_when(
        &self,
        rule: impl Fn(&outbox_core::Message<C>) -> bool + Send + Sync + 'static,
    ) -> Gate {
        let gate = Gate::default();
        *lock(&self.inner.hold) = Some((Arc::new(rule), gate.clone()));
        gate
    }

    /// Yields to the scheduler inside each delivery, to widen race windows.
    pub fn yield_inside(&self, yield_inside: bool) {
        self.inner
            .yield_inside
            .store(yield_inside, Ordering::Relaxed);
    }

    /// Successful deliveries so far, in order.
    pub fn deliveries(&self) -> Vec<Delivery<C>> {
        lock(&self.inner.deliveries).clone()
    }

    /// Receiver calls so far, failed ones included.
    pub fn calls(&self) -> usize {
        self.inner.calls.load(Ordering::SeqCst)
    }

    /// Times one shard was delivered by two callers at once (must stay 0).
    pub fn overlaps(&self) -> usize {
        self.inner.overlaps.load(Ordering::SeqCst)
    }

    /// Waits until at least `count` deliveries were recorded, or `timeout`.
    /// Returns whether they were.
    pub async fn wait_for(&self, count: usize, timeout: std::time::Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.inner.delivered.notified();
                if lock(&self.inner.deliveries).len() >= count {
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
    pub async fn handle(
        &self,
        message: outbox_core::Message<C>,
    ) -> Result<(), outbox_core::HandlerError> {
        self.inner.calls.fetch_add(1, Ordering::SeqCst);
        if !lock(&self.inner.active).insert(message.shard.clone()) {
            self.inner.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        let _active = Active {
            set: &self.inner.active,
            shard: message.shard.clone(),
        };
        if self.inner.yield_inside.load(Ordering::Relaxed) {
            tokio::task::yield_now().await;
        }
        let hold = lock(&self.inner.hold)
            .as_ref()
            .filter(|(rule, _)| rule(&message))
            .map(|(_, gate)| gate.clone());
        if let Some(gate) = hold {
            gate.pass().await;
        }
        let fail = lock(&self.inner.fail).clone();
        if fail.is_some_and(|rule| rule(&message)) {
            let error = format!("receiver refused {}", message.id);
            if self.inner.permanent.load(Ordering::SeqCst) {
                return Err(outbox_core::permanent(error));
            }
            return Err(error.into());
        }
        lock(&self.inner.deliveries).push(Delivery {
            shard: message.shard.clone(),
            category: message.category,
            object: message.object_identifier,
            id: message.id,
            first_id: message.first_id,
            coalesced: message.coalesced,
            payload: message
                .payload
                .as_ref()
                .map(outbox_core::Payload::to_value_or_text),
            synchronous: message.synchronous,
            traceparent: message.traceparent,
            message_id: message.message_id,
            payload_version: message.payload_version,
            fence: message.fence,
        });
        self.inner.delivered.notify_waiters();
        Ok(())
    }

    /// The shards of each batch the [`batch_receivers`](Self::batch_receivers)
    /// were called with, in call order.
    pub fn batches(&self) -> Vec<Vec<ShardKey>> {
        lock(&self.inner.batches).clone()
    }

    /// Handles a batch: every message as [`handle`](Self::handle) does,
    /// all at once, one result per message in the batch's order.
    pub async fn handle_batch(
        &self,
        batch: Vec<outbox_core::BatchItem<C>>,
    ) -> Vec<Result<(), outbox_core::HandlerError>> {
        lock(&self.inner.batches).push(
            batch
                .iter()
                .map(|item| item.message.shard.clone())
                .collect(),
        );
        futures::future::join_all(batch.into_iter().map(|item| self.handle(item.message))).await
    }

    /// Receivers for every live category, all into this recorder, with a
    /// batch handler ([`Receivers::on_batch`](outbox_core::Receivers::on_batch))
    /// for `batched` categories and a single one for the others.
    pub fn batch_receivers(&self, batched: &[C]) -> outbox_core::Receivers<C> {
        let mut receivers = outbox_core::Receivers::new();
        for &category in C::ALL {
            if category.is_retired() {
                continue;
            }
            let recorder = self.clone();
            if batched.contains(&category) {
                receivers = receivers.on_batch(category, move |batch| {
                    let recorder = recorder.clone();
                    async move { recorder.handle_batch(batch).await }
                });
            } else {
                receivers.register(category, move |message| {
                    let recorder = recorder.clone();
                    async move { recorder.handle(message).await }
                });
            }
        }
        receivers
    }

    /// Receivers for every live category, all into this recorder.
    pub fn receivers(&self) -> outbox_core::Receivers<C> {
        self.batch_receivers(&[])
    }
}
