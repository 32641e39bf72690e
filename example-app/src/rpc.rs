//! Cross-silo RPC: HTTP + JSON, authenticated with a shared secret.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::error::ApiError;

/// The header that carries the shared secret.
pub const SECRET_HEADER: &str = "x-silo-secret";

/// A call to another silo failed; the outbox retries it with backoff.
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

/// A client for one silo's `/rpc` routes.
#[derive(Clone, Debug)]
pub struct RpcClient {
    http: reqwest::Client,
    base_url: String,
    secret: String,
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
        }
    }

    async fn send(
        &self,
        method: &'static str,
        builder: reqwest::RequestBuilder,
        url: String,
    ) -> Result<(), RpcError> {
        let response = builder
            .header(SECRET_HEADER, &self.secret)
            .send()
            .await
            .map_err(|source| RpcError::Transport {
                method,
                url: url.clone(),
                source,
            })?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(RpcError::Status {
                method,
                url,
                status: status.as_u16(),
            })
        }
    }

    /// `PUT path` with a JSON body (idempotent upsert).
    pub async fn put(&self, path: &str, body: &impl Serialize) -> Result<(), RpcError> {
        let url = format!("{}{path}", self.base_url);
        self.send("PUT", self.http.put(&url).json(body), url).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: &impl Serialize) -> Result<(), RpcError> {
        let url = format!("{}{path}", self.base_url);
        self.send("POST", self.http.post(&url).json(body), url)
            .await
    }

    /// `DELETE path` (idempotent).
    pub async fn delete(&self, path: &str) -> Result<(), RpcError> {
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
