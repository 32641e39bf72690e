use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use sea_orm::{DatabaseConnection, IsolationLevel, TransactionOptions};
use tower::{Layer, Service};

use outbox_core::worker::Waker;
use outbox_core::{Category, Drainer, FlushError, Receivers};
use outbox_seaorm::{ClaimOn, SeaOrmStore, UnsupportedBackend};

use super::future::ResponseFuture;
use super::on_flush_error::{
    DefaultOnFlushError, OnFlushError, FLUSH_CULLED, FLUSH_DEFERRED, FLUSH_HEADER,
};
use crate::slot::RequestHandle;

type CommitPredicate = Arc<dyn Fn(&Response) -> bool + Send + Sync>;

struct Shared<C: Category> {
    db: DatabaseConnection,
    transaction_options: TransactionOptions,
    drainer: Drainer<C>,
    commit_when: CommitPredicate,
    on_flush_error: Arc<dyn OnFlushError>,
    waker: Option<Waker>,
    claim_before_commit: bool,
}

/// A [`Layer`] that gives every request a transaction and an outbox context;
/// see the [module documentation](crate::layer).
pub struct OutboxLayer<C: Category> {
    shared: Arc<Shared<C>>,
}

impl<C: Category> Clone for OutboxLayer<C> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<C: Category> std::fmt::Debug for OutboxLayer<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxLayer").finish_non_exhaustive()
    }
}

impl<C: Category> OutboxLayer<C> {
    /// A layer over `db` that flushes to `receivers` (with a default
    /// [`Drainer`]). With a background worker, mount its
    /// [`layer`](crate::WorkerHandle::layer) instead: it shares the worker's
    /// drainer and wakes it.
    ///
    /// # Errors
    ///
    /// [`UnsupportedBackend`] for a database other than PostgreSQL or SQLite.
    pub fn new(
        db: DatabaseConnection,
        receivers: Receivers<C>,
    ) -> Result<Self, UnsupportedBackend> {
        let drainer = Drainer::new(SeaOrmStore::new(db.clone())?, receivers);
        Ok(Self::from_parts(db, drainer))
    }

    /// A layer over `db` that flushes through `drainer`, which must deliver
    /// from the same database (a drainer with its own clock or tuning, in
    /// tests).
    pub fn from_parts(db: DatabaseConnection, drainer: Drainer<C>) -> Self {
        Self {
            shared: Arc::new(Shared {
                db,
                transaction_options: outbox_seaorm::write_transaction_options(),
                drainer,
                commit_when: Arc::new(is_success),
                on_flush_error: Arc::new(DefaultOnFlushError),
                waker: None,
                claim_before_commit: true,
            }),
        }
    }

    fn map(self, change: impl FnOnce(&mut Shared<C>)) -> Self {
        let mut shared = match Arc::try_unwrap(self.shared) {
            Ok(shared) => shared,
            Err(shared) => Shared {
                db: shared.db.clone(),
                transaction_options: shared.transaction_options,
                drainer: shared.drainer.clone(),
                commit_when: shared.commit_when.clone(),
                on_flush_error: shared.on_flush_error.clone(),
                waker: shared.waker.clone(),
                claim_before_commit: shared.claim_before_commit,
            },
        };
        change(&mut shared);
        Self {
            shared: Arc::new(shared),
        }
    }

    /// Commits when `predicate` holds for the response. Default: the status
    /// is neither 4xx nor 5xx.
    pub fn commit_when(
        self,
        predicate: impl Fn(&Response) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.map(|shared| shared.commit_when = Arc::new(predicate))
    }

    /// What to answer when the flush after a commit fails. Default:
    /// [`DefaultOnFlushError`] (the handler's response, with
    /// `outbox-flush: deferred`).
    pub fn on_flush_error(self, hook: impl OnFlushError) -> Self {
        self.map(|shared| shared.on_flush_error = Arc::new(hook))
    }

    /// How the request's transaction begins. Default:
    /// [`outbox_seaorm::write_transaction_options`] (`BEGIN IMMEDIATE` on SQLite, so
    /// that a handler which reads and then writes cannot fail with
    /// `SQLITE_BUSY` when the drain commits in between; a plain `BEGIN` on
    /// PostgreSQL). Set an isolation level here, or
    /// `TransactionOptions::default()` for SQLite's deferred transactions
    /// when most requests only read.
    pub fn transaction_options(self, options: TransactionOptions) -> Self {
        self.map(|shared| shared.transaction_options = options)
    }

    /// Wakes this background drain when a request leaves rows to it, and
    /// leaves to it the rows of a shard whose bucket another worker or
    /// request holds (the flush never waits for them). Default: none (the
    /// drain finds them at its next poll; without a drain, a flush claims a
    /// held shard again after the commit, waiting up to `sync_wait`).
    pub fn waker(self, waker: Waker) -> Self {
        self.map(|shared| shared.waker = Some(waker))
    }

    /// Where the synchronous flush claims the shards a request wrote.
    /// Default `true`: inside the request's transaction, as its last
    /// statement before the `COMMIT` (one statement that never waits; the
    /// commit makes the rows and the claim visible together, and nothing is
    /// sent to the database after it). `false`: after the `COMMIT`, on the
    /// pool (one statement after it). The flush claims after the commit
    /// anyway when [`transaction_options`](Self::transaction_options) asks
    /// for an isolation stricter than read committed, under which a bucket
    /// row changed since the transaction's snapshot would fail the claim.
    /// Either way the delete and the release that follow the deliveries go
    /// to the drainer's completer, in the background (see
    /// [`Drainer::settled`](outbox_core::Drainer::settled)).
    pub fn claim_before_commit(self, before: bool) -> Self {
        self.map(|shared| shared.claim_before_commit = before)
    }
}

fn is_success(response: &Response) -> bool {
    let status = response.status();
    !status.is_client_error() && !status.is_server_error()
}

impl<S, C: Category> Layer<S> for OutboxLayer<C> {
    type Service = Outbox<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        Outbox {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service of [`OutboxLayer`].
pub struct Outbox<S, C: Category> {
    inner: S,
    shared: Arc<Shared<C>>,
}

impl<S: Clone, C: Category> Clone for Outbox<S, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S, C: Category> std::fmt::Debug for Outbox<S, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox").finish_non_exhaustive()
    }
}

impl<S, C> Service<Request> for Outbox<S, C>
where
    S: Service<Request, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    C: Category,
{
    type Response = Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        // The clone is ready-less; keep the ready one for this call.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        let handle = RequestHandle::new(shared.db.clone(), shared.transaction_options);
        request.extensions_mut().insert(handle.clone());
        ResponseFuture {
            inner: Box::pin(run(inner, request, handle, shared)),
        }
    }
}

async fn run<S, C>(
    mut inner: S,
    request: Request,
    handle: RequestHandle,
    shared: Arc<Shared<C>>,
) -> Result<Response, S::Error>
where
    S: Service<Request, Response = Response>,
    C: Category,
{
    let state = handle.0;
    let context = state.context.clone();
    let outcome = AssertUnwindSafe(context.scope(inner.call(request)))
        .catch_unwind()
        .await;
    let response = match outcome {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => {
            roll_back(&state.transaction).await;
            return Err(error);
        }
        Err(panic) => {
            roll_back(&state.transaction).await;
            std::panic::resume_unwind(panic);
        }
    };

    let Ok(mut slot) = state.transaction.clone().try_lock_owned() else {
        context.clear();
        tracing::error!(
            "the request's `Tx` was still alive when the response was ready (moved into a \
             spawned task?); nothing was committed"
        );
        return Ok((
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error: the request's transaction was still in use when its response was \
             ready, so nothing was committed",
        )
            .into_response());
    };
    let transaction = slot.take();
    drop(slot);

    if !(shared.commit_when)(&response) {
        if let Some(transaction) = transaction {
            if let Err(error) = transaction.rollback().await {
                tracing::warn!(%error, "rolling back the request's transaction failed");
            }
        }
        context.clear();
        return Ok(response);
    }
    let mut flush = context.prepare_flush(&shared.drainer);
    if let (Some(flush), Some(_)) = (flush.as_mut(), &shared.waker) {
        flush.leave_held_to_background();
    }
    if let Some(transaction) = transaction {
        if let Some(flush) = flush.as_mut().filter(|_| claims_in_transaction(&shared)) {
            // The last statement before the COMMIT. A failed one leaves the
            // transaction unable to commit (PostgreSQL would answer the
            // COMMIT with a ROLLBACK): nothing is saved.
            if let Err(error) = flush.claim(&ClaimOn(&transaction)).await {
                context.clear();
                tracing::error!(%error, "claiming the request's outbox shards before the commit failed; rolled back");
                if let Err(error) = transaction.rollback().await {
                    tracing::warn!(%error, "rolling back the request's transaction failed");
                }
                return Ok(could_not_save());
            }
        }
        if let Err(error) = transaction.commit().await {
            context.clear();
            tracing::error!(%error, "committing the request's transaction failed");
            return Ok(could_not_save());
        }
    }

    let mut response = response;
    let (mut culled, mut errors) = (false, Vec::new());
    if let Some(mut flush) = flush {
        if !flush.is_claimed() {
            if let Err(error) = flush.claim(&ClaimOn(&shared.db)).await {
                tracing::warn!(%error, "claiming the request's outbox shards after the commit failed");
            }
        }
        let flushed = context.finish_flush(flush).await;
        culled = flushed.report.culled > 0;
        errors = flushed.errors;
    }
    for error in &errors {
        if error.is_operator_control() || matches!(error, FlushError::ShardBusy { .. }) {
            tracing::debug!(%error, "flush after commit skipped; the background drain will deliver");
        } else {
            tracing::warn!(%error, "flush after commit failed; the background drain will deliver");
        }
    }
    if errors.is_empty() {
        mark_undelivered(&mut response, &context, culled);
    } else {
        response = shared.on_flush_error.on_flush_error(&errors, response);
    }
    if let Some(waker) = &shared.waker {
        for kind in context.deferred_kinds() {
            waker.wake(kind).await;
        }
    }
    Ok(response)
}

/// Whether the flush claims inside the request's transaction: asked for,
/// and the transaction's isolation is read committed (the default).
fn claims_in_transaction<C: Category>(shared: &Shared<C>) -> bool {
    shared.claim_before_commit
        && shared
            .transaction_options
            .isolation_level
            .is_none_or(|level| level == IsolationLevel::ReadCommitted)
}

fn could_not_save() -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal error: the change could not be saved",
    )
        .into_response()
}

/// Tells the client that rows of its request were not delivered before the
/// response: `outbox-flush: deferred` when some wait for the background drain
/// (`flush = false`, [`deferred`](crate::deferred)), `culled` when an
/// operator's control dropped them. (A failed flush is the
/// [`OnFlushError`] hook's to report.)
fn mark_undelivered(response: &mut Response, context: &outbox_core::OutboxContext, culled: bool) {
    let value = if !context.deferred_kinds().is_empty() {
        FLUSH_DEFERRED
    } else if culled {
        FLUSH_CULLED
    } else {
        return;
    };
    response
        .headers_mut()
        .insert(FLUSH_HEADER, HeaderValue::from_static(value));
}

async fn roll_back(slot: &tokio::sync::Mutex<tokio::sync::OnceCell<sea_orm::DatabaseTransaction>>) {
    if let Ok(mut slot) = slot.try_lock() {
        if let Some(transaction) = slot.take() {
            if let Err(error) = transaction.rollback().await {
                tracing::warn!(%error, "rolling back the request's transaction failed");
            }
        }
    }
}
