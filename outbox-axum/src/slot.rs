//! The per-request slot that the layer inserts and `Tx` borrows.

use std::sync::Arc;

use sea_orm::{DatabaseConnection, DatabaseTransaction, TransactionOptions};
use tokio::sync::{Mutex, OnceCell};

use outbox_core::OutboxContext;

/// What one request shares between the layer and its extractors.
pub(crate) struct RequestState {
    pub(crate) db: DatabaseConnection,
    /// How the request's transaction begins.
    pub(crate) transaction_options: TransactionOptions,
    /// The request's transaction, begun by the first statement of the
    /// request's `Tx` (not by its extraction: extractors run before the body
    /// is read, and a client that stalls its body must hold no connection).
    pub(crate) transaction: Arc<Mutex<OnceCell<DatabaseTransaction>>>,
    pub(crate) context: OutboxContext,
}

/// The request extension (extensions must be `Clone`).
#[derive(Clone)]
pub(crate) struct RequestHandle(pub(crate) Arc<RequestState>);

impl RequestHandle {
    pub(crate) fn new(db: DatabaseConnection, transaction_options: TransactionOptions) -> Self {
        Self(Arc::new(RequestState {
            db,
            transaction_options,
            transaction: Arc::new(Mutex::new(OnceCell::new())),
            context: OutboxContext::new(),
        }))
    }
}
