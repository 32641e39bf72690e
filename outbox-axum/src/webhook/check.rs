//! Verifying a request's headers against its body.

use axum::http::HeaderMap;
use outbox_core::delivery_headers::{ALL as DELIVERY_HEADERS, MESSAGE_ID_HEADER};
use outbox_core::sink::webhook::{
    WebhookKeys, DELIVERY_SIGNATURE_HEADER, ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER,
};

use super::rejection::WebhookRejection;

/// A request that passed: what was signed.
#[derive(Clone, Debug)]
pub(super) struct Checked {
    /// The `webhook-id` and the signature's timestamp.
    pub(super) delivery: WebhookDelivery,
    /// Whether it came with `outbox-*` delivery headers (signed).
    pub(super) has_delivery_headers: bool,
}

/// Put in a request's extensions by the `verify` middleware: the extractors
/// then do not verify again, and take what was signed from it.
#[derive(Clone, Debug)]
pub(super) struct AlreadyVerified(pub(super) WebhookDelivery);

/// What a verified request was signed as: its `webhook-id` (the message
/// id, for deliveries of `WebhookSink`) and the timestamp its signature
/// covers. The second field of [`Verified`](super::Verified) and
/// [`VerifiedBytes`](super::VerifiedBytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookDelivery {
    id: String,
    timestamp: i64,
}

impl WebhookDelivery {
    /// The `webhook-id`, as signed: the same on every attempt of a delivery
    /// (the endpoint's idempotency key).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The `webhook-id` as a message id, when it is a UUID (every delivery
    /// of `WebhookSink` is: [`Message::message_id`](outbox_core::Message::message_id)).
    pub fn message_id(&self) -> Option<outbox_core::uuid::Uuid> {
        outbox_core::uuid::Uuid::parse_str(&self.id).ok()
    }

    /// When this attempt was signed (`webhook-timestamp`), in Unix
    /// seconds: within the keys' tolerance of this server's clock.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// [`timestamp`](Self::timestamp) as a time.
    pub fn signed_at(&self) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::from_timestamp(self.timestamp, 0).unwrap_or_default()
    }
}

/// A header's text, if the request has it.
fn header<'a>(
    headers: &'a HeaderMap,
    name: &'static str,
) -> Result<Option<&'a str>, WebhookRejection> {
    headers
        .get(name)
        .map(|value| {
            value
                .to_str()
                .map_err(|_| WebhookRejection::MalformedHeader {
                    header: name,
                    reason: "not visible ASCII text",
                })
        })
        .transpose()
}

fn required<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, WebhookRejection> {
    header(headers, name)?.ok_or(WebhookRejection::MissingHeader { header: name })
}

/// Checks `headers` against `body` with `keys` at the system clock: the
/// Standard Webhooks signature and timestamp, then the signature of the
/// `outbox-*` delivery headers when there are any.
pub(super) fn check(
    keys: &WebhookKeys,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Checked, WebhookRejection> {
    let id = required(headers, ID_HEADER)?;
    let timestamp = required(headers, TIMESTAMP_HEADER)?;
    let signatures = required(headers, SIGNATURE_HEADER)?;
    let timestamp = keys
        .verify(id, timestamp, signatures, body)
        .map_err(WebhookRejection::from_verify)?;

    let mut delivery = Vec::new();
    for name in DELIVERY_HEADERS {
        if let Some(value) = header(headers, name)? {
            delivery.push((name, value));
        }
    }
    let signed = WebhookDelivery {
        id: id.to_owned(),
        timestamp,
    };
    if delivery.is_empty() {
        return Ok(Checked {
            delivery: signed,
            has_delivery_headers: false,
        });
    }
    let signatures = header(headers, DELIVERY_SIGNATURE_HEADER)?
        .ok_or(WebhookRejection::UnsignedDeliveryHeaders)?;
    keys.verify_delivery_headers(id, timestamp, &delivery, signatures)
        .map_err(|_| WebhookRejection::UnsignedDeliveryHeaders)?;
    if delivery
        .iter()
        .any(|(name, value)| *name == MESSAGE_ID_HEADER && *value != id)
    {
        return Err(WebhookRejection::MalformedHeader {
            header: MESSAGE_ID_HEADER,
            reason: "not the same as `webhook-id`",
        });
    }
    Ok(Checked {
        delivery: signed,
        has_delivery_headers: true,
    })
}
