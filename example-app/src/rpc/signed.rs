//! What a signed RPC carries: the call it is for (method and path) and its
//! JSON body, in one envelope signed per Standard Webhooks with the
//! caller's key, and the delivery headers signed beside it.
//!
//! Standard Webhooks signs the id, the timestamp and the body, not the
//! method or the path (a webhook endpoint is one URL), nor the server it
//! is sent to. An RPC's path names what it changes
//! (`/rpc/organization-mappings/{id}`), and Control signs calls to every
//! region with the same key, so the envelope puts the recipient silo, the
//! method and the path inside what is signed: a signed call cannot be
//! replayed against another route, nor to another silo.

use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use outbox_core::delivery_headers::MESSAGE_ID_HEADER;
use outbox_core::sink::webhook::{
    WebhookKeys, DELIVERY_SIGNATURE_HEADER, ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER,
};
use serde::{Deserialize, Serialize};

/// The body of every RPC, as signed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    /// The silo the call is for (`us`, `control`): any other refuses it.
    /// Empty in an envelope from a silo older than this field, which every
    /// silo refuses too.
    #[serde(default)]
    pub recipient: String,
    /// The HTTP method (`PUT`).
    pub method: String,
    /// The path (`/rpc/users/5`), without a query.
    pub path: String,
    /// The call's JSON body; none for a `DELETE`.
    #[serde(default)]
    pub body: Option<serde_json::Value>,
}

/// A call that cannot be signed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignError {
    /// The delivery headers hold no message id: an RPC is sent from an
    /// outbox receiver, whose message id the other silo applies once.
    #[error(
        "an RPC needs the message id of the delivery it makes (call it from an outbox receiver)"
    )]
    NoMessageId,
    /// A delivery header's value cannot be sent.
    #[error("the delivery header {0} is not a valid HTTP header value")]
    BadHeader(&'static str),
}

/// A signed call: the headers to send and the body.
#[derive(Clone, Debug)]
pub struct SignedCall {
    /// `webhook-id`, `webhook-timestamp`, `webhook-signature`, the
    /// delivery headers and `outbox-signature`, `content-type`.
    pub headers: HeaderMap,
    /// The envelope's JSON text.
    pub body: Vec<u8>,
}

/// Signs `envelope` with `keys` at `timestamp` (Unix seconds), as the
/// delivery whose headers are `delivery` (`outbox_core::delivery_headers::for_delivery`:
/// its message id becomes the `webhook-id`).
///
/// # Errors
///
/// [`SignError`].
pub fn sign_call(
    keys: &WebhookKeys,
    timestamp: i64,
    delivery: &[(&'static str, String)],
    envelope: &Envelope,
) -> Result<SignedCall, SignError> {
    let id = delivery
        .iter()
        .find(|(name, _)| *name == MESSAGE_ID_HEADER)
        .map(|(_, value)| value.clone())
        .ok_or(SignError::NoMessageId)?;
    // Serialising a `Value` and two strings cannot fail.
    let body = serde_json::to_vec(envelope).unwrap_or_default();
    let pairs: Vec<(&str, &str)> = delivery
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    let mut headers = HeaderMap::new();
    let mut put = |name: &'static str, value: String| {
        let value = HeaderValue::try_from(value).map_err(|_| SignError::BadHeader(name))?;
        headers.insert(HeaderName::from_static(name), value);
        Ok::<_, SignError>(())
    };
    put(ID_HEADER, id.clone())?;
    put(TIMESTAMP_HEADER, timestamp.to_string())?;
    put(SIGNATURE_HEADER, keys.sign(&id, timestamp, &body))?;
    put(
        DELIVERY_SIGNATURE_HEADER,
        keys.sign_delivery_headers(&id, timestamp, &pairs),
    )?;
    for (name, value) in delivery {
        put(name, value.clone())?;
    }
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(SignedCall { headers, body })
}

/// The system clock, in Unix seconds.
pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}
