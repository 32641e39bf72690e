use std::sync::Arc;

use sea_orm::DatabaseConnection;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use outbox_core::OutboxKind;

/// Wakes the background drain: in-process at once, and in other processes
/// with PostgreSQL `NOTIFY` when built with [`with_notify`](Self::with_notify).
/// Clones share the same wake-ups.
#[derive(Clone, Debug, Default)]
pub struct OutboxWaker {
    local: Arc<[Notify; 2]>,
    notify_db: Option<DatabaseConnection>,
}

impl OutboxWaker {
    /// A waker for this process only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also sends `NOTIFY` on `db` (PostgreSQL; ignored for other backends),
    /// so drains in other processes wake too.
    pub fn with_notify(mut self, db: DatabaseConnection) -> Self {
        self.notify_db = Some(db);
        self
    }

    fn slot(&self, kind: OutboxKind) -> &Notify {
        match kind {
            OutboxKind::Region => &self.local[0],
            OutboxKind::Control => &self.local[1],
        }
    }

    /// Wakes the drains of `kind`, here and (with `NOTIFY`) elsewhere.
    pub async fn wake(&self, kind: OutboxKind) {
        self.wake_local(kind);
        if let Some(db) = &self.notify_db {
            if let Err(error) = outbox_seaorm::listener::notify(db, kind).await {
                tracing::debug!(%error, "NOTIFY failed; drains will find the rows at their next poll");
            }
        }
    }

    /// Wakes the drains of `kind` in this process.
    pub fn wake_local(&self, kind: OutboxKind) {
        self.slot(kind).notify_waiters();
    }

    pub(crate) fn notified(&self, kind: OutboxKind) -> Notified<'_> {
        self.slot(kind).notified()
    }
}
