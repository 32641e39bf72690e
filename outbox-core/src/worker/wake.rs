//! Wake-ups: how a commit in one place reaches an idle drain elsewhere.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use crate::shard::OutboxKind;
use crate::store::BoxError;

/// What a [`WakeSource`] received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wakeup {
    /// Rows of this kind were committed for the background drain.
    Rows(OutboxKind),
    /// The source (re)connected: notifications sent before may be lost, so
    /// every kind should be looked at.
    Resync,
}

/// Wake-ups from other processes, e.g. PostgreSQL `LISTEN` (in
/// `outbox-seaorm`). A latency optimisation only: the worker also polls, so a
/// source that cannot deliver (a dropped connection, a transaction-pooling
/// proxy in the way) only delays delivery until the next poll.
#[async_trait]
pub trait WakeSource: Send + 'static {
    /// Waits for the next wake-up. Reports [`Wakeup::Resync`] first, once
    /// connected, and again after every reconnection. On an error the worker
    /// logs it (once, until the source recovers), waits a growing delay and
    /// calls again; the source reconnects then.
    async fn next(&mut self) -> Result<Wakeup, BoxError>;
}

/// Sends a wake-up to drains in other processes, e.g. PostgreSQL `NOTIFY`.
#[async_trait]
pub trait Notifier: Send + Sync + 'static {
    /// Announces that rows of `kind` were committed for the background drain.
    async fn notify(&self, kind: OutboxKind) -> Result<(), BoxError>;
}

/// Wakes the background drain: in this process at once, and in others
/// through a [`Notifier`] when one is set and no drain of the kind runs in
/// this process (one that does delivers the rows itself, so the statement
/// and the `NOTIFY` would be spent for nothing). Clones share the same
/// wake-ups.
#[derive(Clone, Default)]
pub struct Waker {
    local: Arc<[Notify; 2]>,
    /// Drain loops of each kind running in this process.
    draining: Arc<[AtomicUsize; 2]>,
    remote: Option<Arc<dyn Notifier>>,
}

/// Registers a drain loop of a kind with its [`Waker`] while alive.
pub(super) struct Draining {
    draining: Arc<[AtomicUsize; 2]>,
    index: usize,
}

impl Drop for Draining {
    fn drop(&mut self) {
        self.draining[self.index].fetch_sub(1, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waker")
            .field("remote", &self.remote.is_some())
            .finish_non_exhaustive()
    }
}

impl Waker {
    /// A waker for this process only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also notifies other processes through `notifier`.
    pub fn with_notifier(mut self, notifier: impl Notifier) -> Self {
        self.remote = Some(Arc::new(notifier));
        self
    }

    fn index(kind: OutboxKind) -> usize {
        match kind {
            OutboxKind::Region => 0,
            OutboxKind::Control => 1,
        }
    }

    fn slot(&self, kind: OutboxKind) -> &Notify {
        &self.local[Self::index(kind)]
    }

    /// Counts a drain loop of `kind` in this process until the guard drops.
    pub(super) fn draining(&self, kind: OutboxKind) -> Draining {
        let index = Self::index(kind);
        self.draining[index].fetch_add(1, Ordering::SeqCst);
        Draining {
            draining: self.draining.clone(),
            index,
        }
    }

    /// Wakes the drains of `kind`: here, and elsewhere (with a notifier)
    /// unless a drain of `kind` runs here. A failed notification is logged
    /// at debug level: the other processes find the rows at their next poll.
    pub async fn wake(&self, kind: OutboxKind) {
        self.wake_local(kind);
        if self.draining[Self::index(kind)].load(Ordering::SeqCst) > 0 {
            return;
        }
        if let Some(remote) = &self.remote {
            if let Err(error) = remote.notify(kind).await {
                tracing::debug!(%error, "outbox wake-up notification failed; other drains find the rows at their next poll");
            }
        }
    }

    /// Wakes the drains of `kind` in this process.
    pub fn wake_local(&self, kind: OutboxKind) {
        self.slot(kind).notify_waiters();
    }

    /// A future that completes at the next wake-up of `kind` (register it
    /// with `enable` before looking for work, so that a wake-up in between
    /// is not lost).
    pub fn notified(&self, kind: OutboxKind) -> Notified<'_> {
        self.slot(kind).notified()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Default)]
    struct Recorder(Mutex<Vec<OutboxKind>>);

    #[async_trait]
    impl Notifier for Arc<Recorder> {
        async fn notify(&self, kind: OutboxKind) -> Result<(), BoxError> {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).push(kind);
            Ok(())
        }
    }

    #[tokio::test]
    async fn other_processes_are_notified_only_for_kinds_not_drained_here() {
        let sent = Arc::new(Recorder::default());
        let waker = Waker::new().with_notifier(sent.clone());
        let sent = || sent.0.lock().unwrap_or_else(|e| e.into_inner()).clone();

        waker.wake(OutboxKind::Region).await;
        assert_eq!(sent(), [OutboxKind::Region], "no drain here: notify");

        let draining = waker.clone().draining(OutboxKind::Region);
        let woken = waker.notified(OutboxKind::Region);
        tokio::pin!(woken);
        woken.as_mut().enable();
        waker.wake(OutboxKind::Region).await;
        waker.wake(OutboxKind::Control).await;
        assert_eq!(
            sent(),
            [OutboxKind::Region, OutboxKind::Control],
            "the region drain here takes its rows; control still goes out"
        );
        woken.await; // the local drain was woken

        drop(draining);
        waker.wake(OutboxKind::Region).await;
        assert_eq!(sent().len(), 3, "the drain stopped: notify again");
    }
}
