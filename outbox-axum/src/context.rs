//! The request's outbox context, and the `flush = false` opt-outs.

use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::Response;

pub use outbox_core::context::deferred;
use outbox_core::OutboxContext;

use crate::slot::RequestHandle;
use crate::tx::TxRejection;

/// The request's [`OutboxContext`]: which shards the request wrote.
///
/// Call [`defer_flush`](Self::defer_flush) to leave everything the request
/// writes to the background drain (`flush = false`), or wrap part of the work
/// in [`deferred`] to defer just the rows written inside it.
///
/// ```
/// use outbox_axum::OutboxCtx;
///
/// async fn bulk_import(ctx: OutboxCtx) -> axum::http::StatusCode {
///     ctx.defer_flush(); // the background drain delivers these rows
///     // ... write many rows with `Tx` ...
///     axum::http::StatusCode::ACCEPTED
/// }
/// ```
#[derive(Clone, Debug)]
pub struct OutboxCtx(pub OutboxContext);

impl OutboxCtx {
    /// Leaves every row of this request to the background drain.
    pub fn defer_flush(&self) {
        self.0.defer_flush();
    }
}

impl<S: Send + Sync> FromRequestParts<S> for OutboxCtx {
    type Rejection = TxRejection;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<RequestHandle>()
            .map(|handle| OutboxCtx(handle.0.context.clone()))
            .ok_or(TxRejection::MissingLayer)
    }
}

/// A route-level `flush = false`: mount it with
/// `axum::middleware::from_fn(outbox_axum::defer_flush)` on the routes whose
/// rows should go through the background drain (inside `OutboxLayer`).
///
/// ```
/// use axum::{middleware, routing::post, Router};
///
/// async fn bulk() -> &'static str { "accepted" }
/// let routes: Router = Router::new()
///     .route("/bulk", post(bulk))
///     .route_layer(middleware::from_fn(outbox_axum::defer_flush));
/// ```
pub async fn defer_flush(request: Request, next: Next) -> Response {
    match request.extensions().get::<RequestHandle>() {
        Some(handle) => handle.0.context.defer_flush(),
        None => tracing::warn!(
            "`defer_flush` runs outside `OutboxLayer`: mount `OutboxLayer` with `.layer` after \
             the routes, so that it wraps them"
        ),
    }
    next.run(request).await
}
