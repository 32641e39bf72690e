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
    /// The `webhook-id`.
    pub(super) id: String,
    /// Whether it came with `outbox-*` delivery headers (signed).
    pub(super) has_delivery_headers: bool,
}

/// Put in a request's extensions by the `verify` middleware: the extractors
/// then do not verify again.
#[derive(Clone, Debug)]
pub(super) struct AlreadyVerified;

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
    if delivery.is_empty() {
        return Ok(Checked {
            id: id.to_owned(),
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
        id: id.to_owned(),
        has_delivery_headers: true,
    })
}
