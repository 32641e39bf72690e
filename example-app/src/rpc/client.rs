//! [`RpcClient`]: calls to another silo, signed with this silo's key.

use std::time::Duration;

use outbox_core::delivery_headers::for_delivery;
use outbox_core::message::current_delivery;
use outbox_core::sink::webhook::WebhookKeys;
use outbox_core::HandlerError;
use serde::Serialize;

use super::signed::{now, sign_call, Envelope};

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
    /// The address answered with a redirect, which is not followed: a
    /// signed call goes to the silo's configured address only.
    #[error(
        "RPC {method} {url} answered {status}, a redirect to {location}: RPCs follow no \
         redirects; configure the other silo's own address (`--control-addr`, \
         `--us-addr`, `--de-addr`), not one that redirects, then retry the shard"
    )]
    Redirected {
        /// HTTP method.
        method: &'static str,
        /// Target.
        url: String,
        /// The status (`307`).
        status: u16,
        /// Where it pointed (its `location`, or `nowhere`).
        location: String,
    },
    /// The HTTP client could not be built (reported by every call).
    #[error("RPC {method} {url}: no HTTP client: {reason}")]
    Client {
        /// HTTP method.
        method: &'static str,
        /// Target.
        url: String,
        /// Why the client could not be built.
        reason: String,
    },
}

impl RpcError {
    /// Whether retrying the same request cannot succeed: the other silo
    /// answered that the request itself is wrong (400, 413, 414, 415, 422),
    /// the address redirects (a configuration to fix, as for the webhook
    /// sink), or there is no HTTP client. Other statuses may pass: 401/403
    /// after a key is fixed, 404 after a silo is upgraded, 408/409/429 and
    /// 5xx on their own.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            RpcError::Status {
                status: 400 | 413 | 414 | 415 | 422,
                ..
            } | RpcError::Redirected { .. }
                | RpcError::Client { .. }
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
/// are [`HandlerError`]s, permanent when [`RpcError::is_permanent`]. It
/// follows no redirects.
#[derive(Clone)]
pub struct RpcClient {
    /// The client, or why it could not be built.
    http: Result<reqwest::Client, String>,
    base_url: String,
    recipient: String,
    keys: WebhookKeys,
    sender: String,
}

/// Shows where it calls and as whom, never the keys.
impl std::fmt::Debug for RpcClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcClient")
            .field("recipient", &self.recipient)
            .field("base_url", &self.base_url)
            .field("sender", &self.sender)
            .field("keys", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl RpcClient {
    /// A client for silo `recipient` (`control`, or a region's name: what
    /// every call's signed envelope names, so that no other silo accepts
    /// it) at `base_url` (e.g. `http://127.0.0.1:8000`), signing with
    /// `keys`, this silo's own (both during a rotation).
    pub fn new(
        recipient: impl Into<String>,
        base_url: impl Into<String>,
        keys: WebhookKeys,
    ) -> Self {
        let http = reqwest::Client::builder()
            // A redirect would send the signed call elsewhere (a server
            // the address's owner points at): the call fails instead.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(3))
            // Below any silo's header timeout (5 s by default), which also
            // closes idle kept-alive connections: never reuse one the other
            // silo is closing.
            .pool_idle_timeout(Duration::from_secs(1))
            .build()
            .map_err(|error| error.to_string());
        Self {
            http,
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            recipient: recipient.into(),
            keys,
            sender: String::new(),
        }
    }

    /// The name of the silo that calls (`control`, or a region's name):
    /// the other silo verifies the call with this silo's key, and compares
    /// fencing tokens per sender (they grow per outbox database).
    pub fn from_silo(mut self, sender: impl Into<String>) -> Self {
        self.sender = sender.into();
        self
    }

    async fn send(
        &self,
        method: &'static str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<(), HandlerError> {
        let url = format!("{}{path}", self.base_url);
        // Called from a receiver: the other silo applies the message once,
        // and never after a newer claim of its shard.
        let delivery = current_delivery()
            .ok_or_else(|| outbox_core::permanent(super::signed::SignError::NoMessageId))?;
        let envelope = Envelope {
            recipient: self.recipient.clone(),
            method: method.to_owned(),
            path: path.to_owned(),
            body,
        };
        let signed = sign_call(
            &self.keys,
            now(),
            &for_delivery(&delivery, &self.sender),
            &envelope,
        )
        .map_err(outbox_core::permanent)?;
        let http = self.http.as_ref().map_err(|reason| {
            RpcError::Client {
                method,
                url: url.clone(),
                reason: reason.clone(),
            }
            .into_handler_error()
        })?;
        let builder = http
            .request(method.parse().unwrap_or(reqwest::Method::POST), &url)
            .headers(signed.headers)
            .body(signed.body);
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
        } else if status.is_redirection() {
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|location| location.to_str().ok())
                .unwrap_or("nowhere")
                .to_owned();
            Err(RpcError::Redirected {
                method,
                url,
                status: status.as_u16(),
                location,
            }
            .into_handler_error())
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
        self.send("PUT", path, Some(to_value(body)?)).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: &impl Serialize) -> Result<(), HandlerError> {
        self.send("POST", path, Some(to_value(body)?)).await
    }

    /// `DELETE path` (idempotent).
    pub async fn delete(&self, path: &str) -> Result<(), HandlerError> {
        self.send("DELETE", path, None).await
    }
}

fn to_value(body: &impl Serialize) -> Result<serde_json::Value, HandlerError> {
    serde_json::to_value(body).map_err(outbox_core::permanent)
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
        // A redirect is configuration to fix, not a passing fault.
        let redirected = RpcError::Redirected {
            method: "PUT",
            url: "http://us/rpc/users/5".into(),
            status: 307,
            location: "http://elsewhere/".into(),
        };
        assert!(redirected.to_string().contains("follow no redirects"));
        assert!(outbox_core::is_permanent(
            redirected.into_handler_error().as_ref()
        ));
    }

    #[test]
    fn its_debug_never_shows_the_keys() {
        let key = outbox_core::sink::webhook::WebhookSecret::generate();
        let client = RpcClient::new("us", "http://127.0.0.1:8000", WebhookKeys::new(key.clone()))
            .from_silo("control");
        let shown = format!("{client:?}");
        let exposed = key.expose();
        assert!(!shown.contains(&exposed["whsec_".len()..]), "{shown}");
        assert!(
            shown.contains("127.0.0.1:8000")
                && shown.contains(r#"sender: "control""#)
                && shown.contains(r#"recipient: "us""#),
            "{shown}"
        );
    }
}
