//! Receiving signed deliveries: [Standard Webhooks](https://www.standardwebhooks.com/)
//! verified in constant time, within a time window, and applied once (rule
//! 13 on the receiving side: nothing unsigned is applied).
//!
//! The sending side is `outbox_core::sink::webhook::WebhookSink` (feature
//! `webhook`), or any Standard Webhooks library. Both sides share the
//! endpoint's [`WebhookKeys`] (`whsec_…` secrets; two during a rotation).
//!
//! - [`Verified<T>`] extracts the JSON body as a `T`, and [`VerifiedBytes`]
//!   the raw body, once the `webhook-signature` matches one of the keys (in
//!   constant time), the `webhook-timestamp` is within the tolerance (5
//!   minutes by default, [`WebhookKeys::with_tolerance`]) of this server's
//!   clock, and the `outbox-*` delivery headers, if any, are covered by
//!   `outbox-signature`. They take the keys from an `Extension<WebhookKeys>`.
//! - [`verify`] does the same as a middleware, before anything else of the
//!   route runs: put it in front of [`apply_once`](crate::apply_once), so
//!   that a replay inside the window is answered `204` by the inbox
//!   (applied once) and a late delivery is refused by its fencing token,
//!   and nothing of a request that fails verification reaches the inbox.
//!
//! A request that fails is answered with a [`WebhookRejection`]: `400` for
//! a missing or malformed header, `401` for a signature that does not match
//! or a timestamp outside the window (the sender takes any `4xx` but `408`
//! and `429` as permanent: its shard is quarantined until an operator
//! releases it).
//!
//! ```
//! use axum::{http::{Request, StatusCode}, routing::post, Extension, Router};
//! use outbox_axum::webhook::{Verified, WebhookKeys, WebhookSecret};
//! use tower::ServiceExt;
//!
//! #[derive(serde::Deserialize)]
//! struct PriceChanged { cents: i64 }
//!
//! async fn price_changed(Verified(price, _): Verified<PriceChanged>) -> StatusCode {
//!     assert_eq!(price.cents, 990);
//!     StatusCode::NO_CONTENT
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let keys = WebhookKeys::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?; // e.g. from the environment
//! let app = Router::new()
//!     .route("/hooks/prices", post(price_changed))
//!     .layer(Extension(keys.clone()));
//!
//! // What a sender sends (`WebhookSink` does this for each message).
//! let now = chrono::Utc::now().timestamp();
//! let body = r#"{"cents":990}"#;
//! let signed = |body: &'static str, at: i64| {
//!     Request::post("/hooks/prices")
//!         .header("webhook-id", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W")
//!         .header("webhook-timestamp", at.to_string())
//!         .header("webhook-signature", keys.sign("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", at, body.as_bytes()))
//!         .body(axum::body::Body::from(body))
//!         .unwrap()
//! };
//! let accepted = app.clone().oneshot(signed(body, now)).await?;
//! assert_eq!(accepted.status(), StatusCode::NO_CONTENT);
//!
//! // Changed on the way: the signature no longer matches.
//! let mut tampered = signed(body, now);
//! *tampered.body_mut() = axum::body::Body::from(r#"{"cents":1}"#);
//! assert_eq!(app.clone().oneshot(tampered).await?.status(), StatusCode::UNAUTHORIZED);
//! // Replayed ten minutes later: outside the window.
//! assert_eq!(app.oneshot(signed(body, now - 600)).await?.status(), StatusCode::UNAUTHORIZED);
//! # Ok(()) }
//! ```
//!
//! # With `apply_once`
//!
//! Routes that apply deliveries in the request's transaction put [`verify`]
//! outside [`apply_once`](crate::apply_once::apply_once) (a `route_layer`
//! added later runs first), both inside the
//! [`OutboxLayer`](crate::OutboxLayer):
//!
//! ```
//! use axum::{middleware::from_fn_with_state, routing::post, Router};
//! use outbox_axum::apply_once::{apply_once, ApplyOnce};
//! use outbox_axum::webhook::{verify, Verified, WebhookKeys};
//! use outbox_axum::Tx;
//!
//! #[derive(serde::Deserialize)]
//! struct PriceChanged { cents: i64 }
//!
//! async fn price_changed(_tx: Tx, Verified(_price, _): Verified<PriceChanged>) {
//!     // the change, in the request's transaction
//! }
//!
//! fn hooks(keys: WebhookKeys) -> Router {
//!     Router::new()
//!         .route("/hooks/prices", post(price_changed))
//!         .route_layer(from_fn_with_state(ApplyOnce::new("price-hooks"), apply_once))
//!         .route_layer(from_fn_with_state(keys, verify))
//!     // then `.layer(worker.layer())`, the OutboxLayer, outside both
//! }
//! # let _ = hooks;
//! ```
//!
//! In that order, for each request: the signature and the window are
//! checked (else `400`/`401`, nothing recorded); the inbox records the
//! `webhook-id` (the same on every attempt of a message) in the request's
//! transaction, so a redelivery or a replay inside the window is answered
//! `204` without running the route; the fencing token, signed with the
//! other `outbox-*` headers, is checked against the highest applied for
//! its sender and shard (`204` for a superseded one); then the route runs,
//! and commits with the inbox's record or not at all.
//!
//! A delivery without `outbox-*` headers (from another Standard Webhooks
//! sender) whose `webhook-id` is a UUID is recorded by that id; other ids
//! are not recorded by `apply_once` (its inbox keys on UUIDs), and it has
//! no fencing token to check. The fence is only as good as the transport:
//! an active man-in-the-middle could strip a late delivery's `outbox-*`
//! headers and `outbox-signature`, so use HTTPS.

mod check;
mod extract;
mod middleware;
mod rejection;

pub use check::WebhookDelivery;
pub use extract::{Verified, VerifiedBytes};
pub use middleware::verify;
pub use outbox_core::sink::webhook::{
    InvalidSecret, VerifyError, WebhookKeys, WebhookSecret, DEFAULT_TOLERANCE,
};
pub use rejection::WebhookRejection;
