//! Receiving another service's deliveries over HTTP: each applied once,
//! and never after a newer claim of its shard (rules 6 and 12, on the
//! receiving side).
//!
//! The sending side calls from inside a receiver (a replicated model's
//! `handle_async_replication`, any `Receivers::on` handler) and adds
//! [`delivery_headers`] to its request: the message id, and the claim's
//! fencing token with its shard, category and the sender's name. The
//! receiving side puts [`apply_once`] on those routes, inside the
//! [`OutboxLayer`](crate::OutboxLayer) (it uses the request's [`Tx`]):
//!
//! - the message id is recorded in the request's transaction
//!   ([`Inbox::receive`]), so a redelivery (a crash between the call and
//!   the sender's outbox delete) is answered `204 No Content` without
//!   running the route;
//! - the fencing token is checked against the highest one applied for that
//!   sender and shard ([`Inbox::fence`], in the same transaction): a lower
//!   one comes from a worker that was paused past its lease after a newer
//!   claim of the shard was applied, and is answered `204` without running
//!   the route, so an old state never lands over a newer one; the refusal
//!   is counted (`outbox.superseded`, and per sender and shard in
//!   `outbox_inbox_fence`, listed by `Admin::inbox`).
//!
//! Both commit with the route's change or not at all. A request without the
//! headers (made by hand) runs as it is; a malformed one is refused with
//! `400` ([`ApplyOnceRejection`]).
//!
//! ```
//! use axum::{middleware, routing::put, Router};
//! use outbox_axum::apply_once::{apply_once, ApplyOnce};
//! use outbox_axum::Tx;
//!
//! async fn upsert_user(_tx: Tx) { /* the change, in the request's transaction */ }
//!
//! let rpc: Router = Router::new()
//!     .route("/rpc/users/{id}", put(upsert_user))
//!     // Inside the outbox layer (`.layer(worker.layer())` further out).
//!     .route_layer(middleware::from_fn_with_state(ApplyOnce::new("rpc"), apply_once));
//! # let _ = rpc;
//! ```
//!
//! And the sending side, e.g. with `reqwest` (whose builder takes an
//! `http::HeaderMap`):
//!
//! ```
//! # async fn send(client: reqwest::Client) -> Result<(), outbox_core::HandlerError> {
//! // Inside a receiver: the delivery's id, token, shard and category.
//! client
//!     .put("http://region-us/rpc/users/7")
//!     .headers(outbox_axum::apply_once::delivery_headers("control"))
//!     .send()
//!     .await?
//!     .error_for_status()?;
//! # Ok(()) }
//! ```

use axum::extract::{FromRequestParts, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use outbox_core::message::current_delivery;
use outbox_core::uuid::Uuid;
use outbox_core::FencingToken;
use outbox_seaorm::inbox::{Fence, FenceKey, Inbox, Received};
use sea_orm::DbErr;

use crate::tx::{Tx, TxRejection};

/// The names of the delivery headers: defined in
/// [`outbox_core::delivery_headers`], which the webhook sink
/// (`outbox_core::sink::webhook`) writes too.
pub use outbox_core::delivery_headers::{
    CATEGORY_HEADER, FENCE_HEADER, MESSAGE_ID_HEADER, SENDER_HEADER, SHARD_HEADER,
};

/// The headers that let the receiving side's [`apply_once`] apply the
/// current delivery once and in fence order: its message id, fencing token,
/// shard and category, and `sender`, the name of this service (the same
/// for all its processes, distinct from every other sender of the
/// receiving side). Empty outside a receiver (no current delivery: see
/// `outbox_core::message::current_delivery`), and without the fence
/// headers when `sender` is empty.
pub fn delivery_headers(sender: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let Some(delivery) = current_delivery() else {
        return headers;
    };
    for (name, value) in outbox_core::delivery_headers::for_delivery(&delivery, sender) {
        if let Ok(value) = HeaderValue::try_from(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    headers
}

/// The state of [`apply_once`]: the inbox consumer its routes record
/// deliveries under (one name per set of routes that apply a message
/// together; the records live in the request's database).
#[derive(Clone, Debug)]
pub struct ApplyOnce {
    inbox: Inbox,
}

impl ApplyOnce {
    /// Records under the inbox consumer `consumer`.
    pub fn new(consumer: impl Into<std::sync::Arc<str>>) -> Self {
        Self {
            inbox: Inbox::new(consumer),
        }
    }

    /// Records in `inbox` (its consumer and clock).
    pub fn with_inbox(inbox: Inbox) -> Self {
        Self { inbox }
    }
}

/// Middleware (`axum::middleware::from_fn_with_state`): runs the route only
/// for a delivery not applied before and not superseded; see the [module
/// documentation](self).
pub async fn apply_once(State(state): State<ApplyOnce>, request: Request, next: Next) -> Response {
    match first_delivery(&state.inbox, request).await {
        Ok(Some(request)) => next.run(request).await,
        Ok(None) => StatusCode::NO_CONTENT.into_response(),
        Err(rejection) => rejection.into_response(),
    }
}

/// Why [`apply_once`] refused a request.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum ApplyOnceRejection {
    /// A delivery header is malformed, or the fencing token came without
    /// its shard or sender. `400`.
    #[error("{header}: {reason}")]
    BadHeader {
        /// The header.
        header: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The request's transaction could not be had (no `OutboxLayer`
    /// outside the route). `500`.
    #[error(transparent)]
    Transaction(#[from] TxRejection),
    /// The inbox could not be read or written (the migrations have not run,
    /// the database is gone). `503`: the sender retries.
    #[error("the inbox could not record the delivery: {0}")]
    Database(#[from] DbErr),
}

crate::error_debug::debug_with_message!(ApplyOnceRejection {
    BadHeader,
    Transaction,
    Database
});

impl ApplyOnceRejection {
    /// The response status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApplyOnceRejection::BadHeader { .. } => StatusCode::BAD_REQUEST,
            ApplyOnceRejection::Transaction(rejection) => rejection.status(),
            ApplyOnceRejection::Database(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl IntoResponse for ApplyOnceRejection {
    fn into_response(self) -> Response {
        if let ApplyOnceRejection::Database(error) = &self {
            tracing::error!(%error, "apply_once: the inbox failed");
        }
        (self.status(), self.to_string()).into_response()
    }
}

/// A header's text, if the request has it.
fn header<'a>(
    headers: &'a HeaderMap,
    name: &'static str,
) -> Result<Option<&'a str>, ApplyOnceRejection> {
    headers
        .get(name)
        .map(|value| {
            value.to_str().map_err(|_| ApplyOnceRejection::BadHeader {
                header: name,
                reason: "not visible ASCII text",
            })
        })
        .transpose()
}

/// The fence of a request that carries [`FENCE_HEADER`]: then its shard and
/// sender are required too.
fn fence_key(headers: &HeaderMap) -> Result<Option<FenceKey>, ApplyOnceRejection> {
    let Some(fence) = header(headers, FENCE_HEADER)? else {
        return Ok(None);
    };
    let token: FencingToken = fence.parse().map_err(|_| ApplyOnceRejection::BadHeader {
        header: FENCE_HEADER,
        reason: "not a fencing token (a positive integer)",
    })?;
    let required = |name: &'static str| {
        header(headers, name)?
            .filter(|text| !text.is_empty())
            .map(str::to_owned)
            .ok_or(ApplyOnceRejection::BadHeader {
                header: name,
                reason: "required with outbox-fence",
            })
    };
    Ok(Some(FenceKey {
        sender: required(SENDER_HEADER)?,
        shard: required(SHARD_HEADER)?,
        category: header(headers, CATEGORY_HEADER)?
            .unwrap_or("unknown")
            .to_owned(),
        token,
    }))
}

/// The request back when it is to be applied, `None` for a duplicate or a
/// superseded delivery.
async fn first_delivery(
    inbox: &Inbox,
    request: Request,
) -> Result<Option<Request>, ApplyOnceRejection> {
    let Some(id) = header(request.headers(), MESSAGE_ID_HEADER)? else {
        return Ok(Some(request));
    };
    let id = id
        .parse::<Uuid>()
        .map_err(|_| ApplyOnceRejection::BadHeader {
            header: MESSAGE_ID_HEADER,
            reason: "not a UUID",
        })?;
    let fence = fence_key(request.headers())?;
    let (mut parts, body) = request.into_parts();
    // The request's transaction; released (not ended) when `tx` drops, so
    // the route extracts it again and the layer commits both.
    let tx = Tx::from_request_parts(&mut parts, &()).await?;
    if let Some(key) = &fence {
        if let Fence::Superseded { highest } = inbox.fence(&tx, key).await? {
            drop(tx);
            tracing::info!(
                message_id = %id,
                shard = %key.shard,
                fence = %key.token,
                %highest,
                "outbox message superseded by a newer claim of its shard: not applied"
            );
            return Ok(None);
        }
    }
    let received = inbox.receive(&tx, id).await?;
    drop(tx);
    if received == Received::Duplicate {
        tracing::info!(message_id = %id, "outbox message applied before: skipped");
        return Ok(None);
    }
    Ok(Some(Request::from_parts(parts, body)))
}
