//! Cross-silo RPC: HTTP + JSON, authenticated with a shared secret.

use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use outbox_axum::Tx;
use outbox_core::uuid::Uuid;
use outbox_core::FencingToken;
use outbox_core::HandlerError;
use outbox_seaorm::inbox::{Fence, FenceKey, Inbox, Received};
use serde::Serialize;

use crate::error::ApiError;

/// The header that carries the shared secret.
pub const SECRET_HEADER: &str = "x-silo-secret";

/// The header that carries the id of the outbox message an RPC applies
/// (sent by [`RpcClient`] from within a receiver): the silo that applies it
/// records it in its inbox ([`apply_once`]), so a message redelivered
/// after a crash between its RPC and the outbox delete is applied once.
pub const MESSAGE_ID_HEADER: &str = "outbox-message-id";

/// The headers that carry the delivery's fencing token, shard and category,
/// and the silo that sent it (sent by [`RpcClient`] from within a
/// receiver): [`apply_once`] refuses a call whose token is lower than one
/// applied for the same sender and shard (a worker paused past its lease),
/// so an old state is never put back over a newer one.
pub const FENCE_HEADER: &str = "outbox-fence";
/// See [`FENCE_HEADER`].
pub const SHARD_HEADER: &str = "outbox-shard";
/// See [`FENCE_HEADER`].
pub const CATEGORY_HEADER: &str = "outbox-category";
/// See [`FENCE_HEADER`].
pub const SENDER_HEADER: &str = "outbox-sender";

/// The inbox consumer of the RPC routes (one per silo database).
const RPC_CONSUMER: &str = "rpc";

/// Middleware of the RPC routes (inside the outbox layer, behind the
/// secret): applies each outbox message once. It records the message id of
/// [`MESSAGE_ID_HEADER`] in the request's transaction, so that it commits
/// with the route's change or not at all, and answers 204 without running
/// the route when an earlier call applied it. A call that carries a
/// fencing token ([`FENCE_HEADER`], with its shard and sender) is also
/// checked against the highest token applied for that sender and shard, in
/// the same transaction: a lower one (from a worker paused past its lease,
/// after a newer claim of the shard was applied) is answered 204 without
/// running the route (rule 12). A call without the headers (made by hand)
/// runs as it is; a malformed id or token is a 400.
pub async fn apply_once(request: Request, next: Next) -> Response {
    match first_delivery(request).await {
        Ok(Some(request)) => next.run(request).await,
        Ok(None) => StatusCode::NO_CONTENT.into_response(),
        Err(error) => error.into_response(),
    }
}

/// A header's text, if the request has it.
fn header<'a>(request: &'a Request, name: &str) -> Result<Option<&'a str>, ApiError> {
    request
        .headers()
        .get(name)
        .map(|value| {
            value
                .to_str()
                .map_err(|_| ApiError::bad_request(format!("{name} is not text")))
        })
        .transpose()
}

/// The fence of a call that carries [`FENCE_HEADER`]: then its shard and
/// sender are required too.
fn fence_key(request: &Request) -> Result<Option<FenceKey>, ApiError> {
    let Some(fence) = header(request, FENCE_HEADER)? else {
        return Ok(None);
    };
    let token: FencingToken = fence
        .parse()
        .map_err(|_| ApiError::bad_request(format!("{FENCE_HEADER} is not an integer")))?;
    let required = |name: &str| {
        header(request, name)?
            .filter(|text| !text.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| ApiError::bad_request(format!("{FENCE_HEADER} needs {name}")))
    };
    Ok(Some(FenceKey {
        sender: required(SENDER_HEADER)?,
        shard: required(SHARD_HEADER)?,
        category: header(request, CATEGORY_HEADER)?
            .unwrap_or("unknown")
            .to_owned(),
        token,
    }))
}

/// The request back when it is to be applied, `None` for a duplicate or a
/// superseded delivery.
async fn first_delivery(request: Request) -> Result<Option<Request>, ApiError> {
    let Some(id) = header(&request, MESSAGE_ID_HEADER)? else {
        return Ok(Some(request));
    };
    let id = id
        .parse::<Uuid>()
        .map_err(|_| ApiError::bad_request(format!("{MESSAGE_ID_HEADER} is not a UUID")))?;
    let fence = fence_key(&request)?;
    let (mut parts, body) = request.into_parts();
    // The request's transaction; released (not ended) when `tx` drops, so
    // the route extracts it again and the layer commits both.
    let tx = Tx::from_request_parts(&mut parts, &())
        .await
        .map_err(|rejection| ApiError::new(rejection.status(), rejection.body_text()))?;
    let inbox = Inbox::new(RPC_CONSUMER);
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

/// A call to another silo failed. The outbox retries it with backoff, unless
/// the other silo rejected the request itself ([`RpcError::is_permanent`]).
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// The silo could not be reached.
    #[error("RPC {method} {url} failed: {source}")]
    Transport {
        /// HTTP method.
        method: &'static str,
        /// Target.
        url: String,
        /// The client's error.
        source: reqwest::Error,
    },
    /// The silo answered with an error status.
    #[error("RPC {method} {url} answered {status}")]
    Status {
        /// HTTP method.
        method: &'static str,
        /// Target.
        url: String,
        /// The status.
        status: u16,
    },
}

impl RpcError {
    /// Whether retrying the same request cannot succeed: the other silo
    /// answered that the request itself is wrong (400, 413, 414, 415, 422).
    /// Other statuses may pass: 401/403 after a secret is fixed, 404 after
    /// a silo is upgraded, 408/409/429 and 5xx on their own.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            RpcError::Status {
                status: 400 | 413 | 414 | 415 | 422,
                ..
            }
        )
    }

    /// As the error of an outbox receiver: [`outbox_core::permanent`] when
    /// [`is_permanent`](Self::is_permanent), so that the shard is quarantined
    /// (or the message dead-lettered) instead of retried for ever.
    pub fn into_handler_error(self) -> HandlerError {
        if self.is_permanent() {
            outbox_core::permanent(self)
        } else {
            self.into()
        }
    }
}

/// A client for one silo's `/rpc` routes, for outbox receivers: its errors
/// are [`HandlerError`]s, permanent when [`RpcError::is_permanent`].
#[derive(Clone, Debug)]
pub struct RpcClient {
    http: reqwest::Client,
    base_url: String,
    secret: String,
    sender: String,
}

impl RpcClient {
    /// A client for the silo at `base_url` (e.g. `http://127.0.0.1:8000`).
    pub fn new(base_url: impl Into<String>, secret: impl Into<String>) -> Self {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(3))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Self {
            http,
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            secret: secret.into(),
            sender: String::new(),
        }
    }

    /// The name of the silo that calls (`control`, or a region's name),
    /// sent with each delivery's fencing token: tokens grow per outbox
    /// database, so the other silo compares them per sender.
    pub fn from_silo(mut self, sender: impl Into<String>) -> Self {
        self.sender = sender.into();
        self
    }

    async fn send(
        &self,
        method: &'static str,
        builder: reqwest::RequestBuilder,
        url: String,
    ) -> Result<(), HandlerError> {
        let mut builder = builder.header(SECRET_HEADER, &self.secret);
        // Called from a receiver: the other silo applies the message once,
        // and never after a newer claim of its shard.
        if let Some(delivery) = outbox_core::message::current_delivery() {
            builder = builder.header(MESSAGE_ID_HEADER, delivery.message_id.to_string());
            if !self.sender.is_empty() {
                builder = builder
                    .header(FENCE_HEADER, delivery.fence.to_string())
                    .header(SHARD_HEADER, delivery.shard.to_string())
                    .header(CATEGORY_HEADER, delivery.category)
                    .header(SENDER_HEADER, &self.sender);
            }
        }
        let response = builder
            .send()
            .await
            .map_err(|source| RpcError::Transport {
                method,
                url: url.clone(),
                source,
            })
            .map_err(RpcError::into_handler_error)?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(RpcError::Status {
                method,
                url,
                status: status.as_u16(),
            }
            .into_handler_error())
        }
    }

    /// `PUT path` with a JSON body (idempotent upsert).
    pub async fn put(&self, path: &str, body: &impl Serialize) -> Result<(), HandlerError> {
        let url = format!("{}{path}", self.base_url);
        self.send("PUT", self.http.put(&url).json(body), url).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: &impl Serialize) -> Result<(), HandlerError> {
        let url = format!("{}{path}", self.base_url);
        self.send("POST", self.http.post(&url).json(body), url)
            .await
    }

    /// `DELETE path` (idempotent).
    pub async fn delete(&self, path: &str) -> Result<(), HandlerError> {
        let url = format!("{}{path}", self.base_url);
        self.send("DELETE", self.http.delete(&url), url).await
    }
}

/// Refuses `/rpc` requests without the shared secret (401, nothing changed).
pub async fn require_secret(
    State(secret): State<String>,
    request: Request,
    next: Next,
) -> Response {
    let given = request
        .headers()
        .get(SECRET_HEADER)
        .and_then(|value| value.to_str().ok());
    if given != Some(secret.as_str()) {
        return ApiError::new(StatusCode::UNAUTHORIZED, "missing or wrong silo secret")
            .into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: u16) -> HandlerError {
        RpcError::Status {
            method: "PUT",
            url: "http://control/rpc".into(),
            status,
        }
        .into_handler_error()
    }

    #[test]
    fn a_rejected_request_is_permanent_and_a_passing_fault_is_not() {
        for status in [400, 413, 414, 415, 422] {
            assert!(
                outbox_core::is_permanent(answered(status).as_ref()),
                "{status}"
            );
        }
        for status in [401, 403, 404, 408, 409, 429, 500, 502, 503] {
            assert!(
                !outbox_core::is_permanent(answered(status).as_ref()),
                "{status}"
            );
        }
    }
}
