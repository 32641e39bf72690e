//! The `Tx` extractor: the request's transaction.

use async_trait::async_trait;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sea_orm::{
    AccessMode, ConnectionTrait, DatabaseTransaction, DbBackend, DbErr, ExecResult, IsolationLevel,
    QueryResult, Statement, TransactionError, TransactionOptions, TransactionTrait,
};
use tokio::sync::{OnceCell, OwnedMutexGuard};

use crate::slot::RequestHandle;

/// The request's database transaction, begun by its first statement.
///
/// Use it wherever SeaORM takes a `ConnectionTrait` (`&tx`), or a
/// `TransactionTrait` (`tx.begin()` opens a savepoint);
/// [`Tx::database_transaction`] gives the `&DatabaseTransaction` itself.
/// [`OutboxLayer`](crate::OutboxLayer) commits it after the handler when the
/// response is a success, and rolls it back otherwise. Outbox rows written on
/// it are flushed right after the commit.
///
/// Extracting a `Tx` takes no connection: the transaction begins with the
/// first statement, so a handler that also reads a body (which axum extracts
/// last) holds nothing while a slow client sends it, and a request that never
/// uses its `Tx` costs no transaction. When the transaction cannot begin (the
/// pool is exhausted, the database is down), that first statement fails with
/// the pool's `DbErr`.
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
    slot: OwnedMutexGuard<OnceCell<DatabaseTransaction>>,
    handle: RequestHandle,
}

impl std::fmt::Debug for Tx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx")
            .field("begun", &self.slot.initialized())
            .finish_non_exhaustive()
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
        let slot = handle
            .0
            .transaction
            .clone()
            .try_lock_owned()
            .map_err(|_| TxRejection::AlreadyExtracted.traced())?;
        Ok(Tx { slot, handle })
    }
}

impl Tx {
    /// The request's transaction, begun now if no statement has run on it
    /// yet (with the layer's
    /// [`transaction_options`](crate::OutboxLayer::transaction_options)).
    ///
    /// # Errors
    ///
    /// The database's error when the transaction cannot begin.
    pub async fn database_transaction(&self) -> Result<&DatabaseTransaction, DbErr> {
        self.slot
            .get_or_try_init(|| async {
                let state = &self.handle.0;
                state
                    .db
                    .begin_with_options(state.transaction_options)
                    .await
                    .inspect_err(|error| {
                        tracing::error!(%error, "could not begin the request's transaction");
                    })
            })
            .await
    }

    /// Whether the transaction has begun (a statement ran on it).
    pub fn is_begun(&self) -> bool {
        self.slot.initialized()
    }
}

#[async_trait]
impl ConnectionTrait for Tx {
    fn get_database_backend(&self) -> DbBackend {
        self.handle.0.db.get_database_backend()
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        self.database_transaction().await?.execute_raw(stmt).await
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        self.database_transaction()
            .await?
            .execute_unprepared(sql)
            .await
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        self.database_transaction().await?.query_one_raw(stmt).await
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        self.database_transaction().await?.query_all_raw(stmt).await
    }

    fn support_returning(&self) -> bool {
        self.handle.0.db.support_returning()
    }
}

/// Nested transactions are savepoints of the request's transaction.
#[async_trait]
impl TransactionTrait for Tx {
    type Transaction = DatabaseTransaction;

    async fn begin(&self) -> Result<DatabaseTransaction, DbErr> {
        self.database_transaction().await?.begin().await
    }

    async fn begin_with_config(
        &self,
        isolation_level: Option<IsolationLevel>,
        access_mode: Option<AccessMode>,
    ) -> Result<DatabaseTransaction, DbErr> {
        self.database_transaction()
            .await?
            .begin_with_config(isolation_level, access_mode)
            .await
    }

    async fn begin_with_options(
        &self,
        options: TransactionOptions,
    ) -> Result<DatabaseTransaction, DbErr> {
        self.database_transaction()
            .await?
            .begin_with_options(options)
            .await
    }

    async fn transaction<F, T, E>(&self, callback: F) -> Result<T, TransactionError<E>>
    where
        F: for<'c> FnOnce(
                &'c DatabaseTransaction,
            ) -> std::pin::Pin<
                Box<dyn std::future::Future<Output = Result<T, E>> + Send + 'c>,
            > + Send,
        T: Send,
        E: std::fmt::Display + std::fmt::Debug + Send,
    {
        match self.database_transaction().await {
            Ok(transaction) => transaction.transaction(callback).await,
            Err(error) => Err(TransactionError::Connection(error)),
        }
    }

    async fn transaction_with_config<F, T, E>(
        &self,
        callback: F,
        isolation_level: Option<IsolationLevel>,
        access_mode: Option<AccessMode>,
    ) -> Result<T, TransactionError<E>>
    where
        F: for<'c> FnOnce(
                &'c DatabaseTransaction,
            ) -> std::pin::Pin<
                Box<dyn std::future::Future<Output = Result<T, E>> + Send + 'c>,
            > + Send,
        T: Send,
        E: std::fmt::Display + std::fmt::Debug + Send,
    {
        match self.database_transaction().await {
            Ok(transaction) => {
                transaction
                    .transaction_with_config(callback, isolation_level, access_mode)
                    .await
            }
            Err(error) => Err(TransactionError::Connection(error)),
        }
    }
}

/// Why a [`Tx`] could not be extracted. Each variant has a fixed status and
/// body; details go to `tracing` (target `outbox_axum::rejection`).
#[derive(Clone, Copy, PartialEq, Eq, thiserror::Error)]
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
    /// Never returned: deprecated, kept until 0.2 so that a `match` that
    /// names it compiles.
    #[deprecated(
        since = "0.1.1",
        note = "never returned: a `Tx` begins its transaction at its first statement, which \
                fails with the pool's `DbErr`; match that instead"
    )]
    #[doc(hidden)]
    #[error("could not begin a database transaction")]
    Begin,
}

crate::error_debug::debug_with_message!(TxRejection {
    MissingLayer,
    AlreadyExtracted,
    Begin
});

impl TxRejection {
    /// The response status.
    pub fn status(&self) -> StatusCode {
        match self {
            TxRejection::MissingLayer | TxRejection::AlreadyExtracted => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            #[allow(deprecated)]
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

#[cfg(test)]
mod tests {
    use super::TxRejection;

    #[test]
    fn a_rejections_debug_names_the_fix() {
        let debug = format!("{:?}", TxRejection::MissingLayer);
        assert!(
            debug.starts_with("TxRejection::MissingLayer: ") && debug.contains("add `.layer("),
            "{debug}"
        );
    }
}
