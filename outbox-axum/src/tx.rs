//! The `Tx` extractor: the request's transaction.

use std::ops::Deref;

use async_trait::async_trait;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sea_orm::{
    ConnectionTrait, DatabaseTransaction, DbBackend, DbErr, ExecResult, QueryResult, Statement,
    TransactionTrait,
};
use tokio::sync::OwnedMappedMutexGuard;

use crate::slot::RequestHandle;

/// The request's database transaction, begun on first extraction.
///
/// Use it wherever SeaORM takes a `ConnectionTrait` (`&tx`, or `&*tx` for a
/// `&DatabaseTransaction`). [`OutboxLayer`](crate::OutboxLayer) commits it
/// after the handler when the response is a success, and rolls it back
/// otherwise. Outbox rows written on it are flushed right after the commit.
///
/// Drop it before the handler returns: a `Tx` still alive when the response is
/// ready (moved into a spawned task, say) makes the layer answer 500 and commit
/// nothing.
///
/// ```
/// use axum::{routing::post, Router};
/// use outbox_axum::Tx;
/// use sea_orm::ConnectionTrait;
///
/// async fn create(tx: Tx) -> Result<&'static str, axum::http::StatusCode> {
///     tx.execute_unprepared("INSERT INTO widgets (name) VALUES ('a')")
///         .await
///         .map_err(|_| axum::http::StatusCode::INTERNAL_SERVER_ERROR)?;
///     Ok("created")
/// }
/// let app: Router = Router::new().route("/widgets", post(create));
/// ```
pub struct Tx {
    guard: OwnedMappedMutexGuard<Option<DatabaseTransaction>, DatabaseTransaction>,
}

impl std::fmt::Debug for Tx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx").finish_non_exhaustive()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Tx {
    type Rejection = TxRejection;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let handle = parts
            .extensions
            .get::<RequestHandle>()
            .cloned()
            .ok_or_else(|| TxRejection::MissingLayer.traced())?;
        let mut slot = handle
            .0
            .transaction
            .clone()
            .try_lock_owned()
            .map_err(|_| TxRejection::AlreadyExtracted.traced())?;
        if slot.is_none() {
            match handle
                .0
                .db
                .begin_with_options(handle.0.transaction_options)
                .await
            {
                Ok(transaction) => *slot = Some(transaction),
                Err(error) => {
                    tracing::error!(%error, "could not begin the request's transaction");
                    return Err(TxRejection::Begin.traced());
                }
            }
        }
        let guard = tokio::sync::OwnedMutexGuard::try_map(slot, Option::as_mut)
            .map_err(|_| TxRejection::Begin.traced())?;
        Ok(Tx { guard })
    }
}

impl Deref for Tx {
    type Target = DatabaseTransaction;

    fn deref(&self) -> &DatabaseTransaction {
        &self.guard
    }
}

#[async_trait]
impl ConnectionTrait for Tx {
    fn get_database_backend(&self) -> DbBackend {
        self.guard.get_database_backend()
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        self.guard.execute_raw(stmt).await
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        self.guard.execute_unprepared(sql).await
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        self.guard.query_one_raw(stmt).await
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        self.guard.query_all_raw(stmt).await
    }
}

/// Why a [`Tx`] could not be extracted. Each variant has a fixed status and
/// body; details go to `tracing` (target `outbox_axum::rejection`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TxRejection {
    /// The router has no `OutboxLayer` above this handler.
    #[error(
        "`Tx` needs `OutboxLayer`: add `.layer(worker.layer())` (or `OutboxLayer::new(db, receivers)`) to the router \
         (outside the routes that use `Tx`)"
    )]
    MissingLayer,
    /// A `Tx` of this request is still alive (extracted twice, or in a
    /// middleware and the handler).
    #[error("`Tx` was extracted twice in one request; extract it once and pass it along")]
    AlreadyExtracted,
    /// The database refused to begin a transaction.
    #[error("could not begin a database transaction")]
    Begin,
}

impl TxRejection {
    /// The response status.
    pub fn status(&self) -> StatusCode {
        match self {
            TxRejection::MissingLayer | TxRejection::AlreadyExtracted => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            TxRejection::Begin => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The response body.
    pub fn body_text(&self) -> String {
        self.to_string()
    }

    fn traced(self) -> Self {
        tracing::trace!(target: "outbox_axum::rejection", rejection = %self, "rejecting request");
        self
    }
}

impl IntoResponse for TxRejection {
    fn into_response(self) -> Response {
        (self.status(), self.body_text()).into_response()
    }
}
