//! Cross-silo RPC: HTTP + JSON, authenticated with a shared secret.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use outbox_axum::apply_once::ApplyOnce;
use outbox_core::HandlerError;
use serde::Serialize;

use crate::error::ApiError;

/// The header that carries the shared secret.
pub const SECRET_HEADER: &str = "x-silo-secret";

/// The headers that carry an outbox delivery: its message id (each RPC
/// applies a message once), and its fencing token, shard, category and
/// sender (never after a newer claim of its shard). Sent by [`RpcClient`]
/// from within a receiver ([`outbox_axum::apply_once::delivery_headers`]),
/// checked by every RPC route through [`apply_once`].
pub use outbox_axum::apply_once::{
    CATEGORY_HEADER, FENCE_HEADER, MESSAGE_ID_HEADER, SENDER_HEADER, SHARD_HEADER,
};

/// The inbox consumer of the RPC routes (one per silo database).
const RPC_CONSUMER: &str = "rpc";

/// Middleware of the RPC routes (inside the outbox layer, behind the
/// secret): the library's [`outbox_axum::apply_once`] under the inbox
/// consumer `rpc`. Each outbox message is applied once (its id recorded in
/// the request's transaction); a call whose fencing token is lower than one
/// applied for the same sender and shard (a worker paused past its lease)
/// is answered 204 without running the route (rule 12). A call without the
/// headers (made by hand) runs as it is; a malformed id or token is a 400.
pub async fn apply_once(request: Request, next: Next) -> Response {
    outbox_axum::apply_once::apply_once(State(ApplyOnce::new(RPC_CONSUMER)), request, next).await
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
#[derive(Clone)]
pub struct RpcClient {
    http: reqwest::Client,
    base_url: String,
    secret: String,
    sender: String,
}

/// Shows where it calls and as whom, never the secret.
impl std::fmt::Debug for RpcClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcClient")
            .field("base_url", &self.base_url)
            .field("sender", &self.sender)
            .field("secret", &"<redacted>")
            .finish_non_exhaustive()
    }
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
        // Called from a receiver: the other silo applies the message once,
        // and never after a newer claim of its shard (no headers otherwise).
        // Marked sensitive: tracing and reqwest's own `Debug` of the request
        // leave its value out.
        let mut secret = reqwest::header::HeaderValue::from_str(&self.secret).map_err(|_| {
            outbox_core::permanent("the silo secret is not a valid HTTP header value")
        })?;
        secret.set_sensitive(true);
        let builder = builder
            .header(SECRET_HEADER, secret)
            .headers(outbox_axum::apply_once::delivery_headers(&self.sender));
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

    #[test]
    fn its_debug_never_shows_the_secret() {
        let client = RpcClient::new("http://127.0.0.1:8000", "s3cret-s3cret").from_silo("control");
        let shown = format!("{client:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.contains("127.0.0.1:8000") && shown.contains("control"),
            "{shown}"
        );
    }
}
