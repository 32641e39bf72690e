//! The `verify` middleware: a route's requests verified before anything
//! else runs.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use outbox_core::delivery_headers::MESSAGE_ID_HEADER;
use outbox_core::sink::webhook::WebhookKeys;
use outbox_core::uuid::Uuid;

use super::check::{check, AlreadyVerified};
use super::rejection::WebhookRejection;

/// Middleware (`axum::middleware::from_fn_with_state(keys, verify)`):
/// answers a request that is not a signed delivery with a
/// [`WebhookRejection`], and passes the others on, their body intact.
///
/// Put it *outside* [`apply_once`](crate::apply_once::apply_once) (a
/// `route_layer` added after it), so that nothing of a request that fails
/// verification reaches the inbox. A request without `outbox-*` delivery
/// headers (a sender other than `WebhookSink`) whose `webhook-id` is a UUID
/// gets `outbox-message-id` set to it, so `apply_once` records it by that
/// signed id. Handlers behind it take [`Verified`](super::Verified) or
/// [`VerifiedBytes`](super::VerifiedBytes) (not verified again), or any
/// other body extractor.
pub async fn verify(State(keys): State<WebhookKeys>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    // The body, read under the route's `DefaultBodyLimit` (in the
    // extensions).
    let mut whole = Request::new(body);
    *whole.extensions_mut() = parts.extensions.clone();
    let bytes = match Bytes::from_request(whole, &()).await {
        Ok(bytes) => bytes,
        Err(rejection) => return WebhookRejection::Body(rejection).into_response(),
    };
    let checked = match check(&keys, &parts.headers, &bytes) {
        Ok(checked) => checked,
        Err(rejection) => return rejection.into_response(),
    };
    if !checked.has_delivery_headers && Uuid::parse_str(checked.delivery.id()).is_ok() {
        if let Ok(id) = HeaderValue::from_str(checked.delivery.id()) {
            parts
                .headers
                .insert(HeaderName::from_static(MESSAGE_ID_HEADER), id);
        }
    }
    parts.extensions.insert(AlreadyVerified(checked.delivery));
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
