//! Delivers outbox messages to HTTP endpoints, signed per
//! [Standard Webhooks](https://www.standardwebhooks.com/) (feature
//! `webhook`).
//!
//! [`WebhookSink`] is a receiver: register it for the categories to
//! deliver, and the drain POSTs each of their messages to the sink's URL,
//! signed with the endpoint's keys, and deletes the outbox rows only once
//! the endpoint answered `2xx`. The receiving side verifies with
//! [`WebhookKeys::verify`], or in Axum with `outbox_axum::webhook`
//! (`Verified<T>`), which also applies each message once.
//!
//! ```
//! outbox_core::registry! {
//!     ShopScope = 0 (shard_field = "shop_id") {
//!         PriceChanged = 1 (no_coalesce),
//!     }
//! }
//! use axum::{body::Bytes, http::{HeaderMap, StatusCode}, routing::post, Router};
//! use outbox_core::sink::webhook::{WebhookKeys, WebhookSecret, WebhookSink};
//! use outbox_core::{Drainer, MemoryStore, OutboxKind, Receivers, ShardKey};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // One secret per endpoint, shared by both sides: `whsec_…` (from a secret store).
//! let keys = WebhookKeys::new(WebhookSecret::generate());
//!
//! // The endpoint (any Standard Webhooks library can verify, too).
//! let (seen, mut received) = tokio::sync::mpsc::unbounded_channel();
//! let endpoint = Router::new().route("/hooks/prices", post({
//!     let keys = keys.clone();
//!     move |headers: HeaderMap, body: Bytes| async move {
//!         let header = |name| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("");
//!         match keys.verify(header("webhook-id"), header("webhook-timestamp"), header("webhook-signature"), &body) {
//!             Ok(_) => { let _ = seen.send(body); StatusCode::NO_CONTENT }
//!             Err(_) => StatusCode::UNAUTHORIZED,
//!         }
//!     }
//! }));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let url = format!("http://{}/hooks/prices", listener.local_addr()?);
//! tokio::spawn(async move { axum::serve(listener, endpoint).await });
//!
//! // The sending side: the sink as the category's receiver.
//! let sink = WebhookSink::new(&url, keys)?.with_sender("shop-service");
//! let receivers = Receivers::new().on(OutboxCategory::PriceChanged, sink.receiver());
//! let store = MemoryStore::new(); // (`OutboxWorker` drains the database)
//! let shop = ShardKey::region(OutboxScope::ShopScope, 42);
//! store.write(&shop, OutboxCategory::PriceChanged, 7, Some(serde_json::json!({ "cents": 990 })));
//! Drainer::new(store.clone(), receivers).drain_due(OutboxKind::Region).await?;
//! assert!(store.rows(OutboxKind::Region).is_empty()); // accepted, then deleted
//! assert_eq!(received.recv().await.as_deref(), Some(br#"{"cents":990}"#.as_slice()));
//! # Ok(()) }
//! ```
//!
//! # What is sent
//!
//! A `POST` to the sink's URL, whose body is the payload's JSON text (`null`
//! for a message without a payload; with [CloudEvents](#cloudevents), as
//! that section says), with:
//!
//! | header | value |
//! |---|---|
//! | `content-type` | `application/json` |
//! | `webhook-id` ([`ID_HEADER`]) | the message id ([`Message::message_id`](crate::Message::message_id)), the same on every attempt: the endpoint's idempotency key |
//! | `webhook-timestamp` ([`TIMESTAMP_HEADER`]) | when this attempt was signed, Unix seconds |
//! | `webhook-signature` ([`SIGNATURE_HEADER`]) | `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`, one per key, space-separated |
//! | `outbox-message-id` | the message id again, for `outbox_axum::apply_once` (see [`crate::delivery_headers`]) |
//! | `outbox-fence`, `outbox-shard`, `outbox-category`, `outbox-sender` | with [`WebhookSink::with_sender`]: the claim's fencing token (rule 12), the shard, the category, the sender |
//! | `outbox-signature` ([`DELIVERY_SIGNATURE_HEADER`]) | the signatures of the `outbox-*` headers (below) |
//! | `traceparent` ([`TRACEPARENT_HEADER`]) | W3C trace context, when there is one |
//!
//! Secrets are `whsec_` and a key of 24 bytes or more in base64
//! ([`WebhookSecret`]; a key without the prefix, or shorter, is refused
//! when parsed, with how to generate one); a
//! timestamp more than 5 minutes away from the endpoint's clock (the
//! [tolerance](WebhookKeys::with_tolerance)) is refused, which bounds how
//! long a captured request can be replayed: within that window, the
//! endpoint drops a replay by its `webhook-id` (`outbox_axum::apply_once`
//! records it in an inbox).
//!
//! # CloudEvents
//!
//! With [`WebhookSink::with_cloudevents`] each delivery is also a
//! CloudEvent, as the HTTP protocol binding of CloudEvents maps one (see
//! [`crate::sink::cloudevents`] for the attributes):
//!
//! - in **binary** mode (the default) the body is the payload's JSON as
//!   above, and the attributes are headers: `ce-specversion`, `ce-id` (the
//!   message id, as `webhook-id`), `ce-source`, `ce-type`, `ce-subject`,
//!   `ce-time`, with `content-type: application/json`; a message without
//!   a payload is an event without data: an empty body and no
//!   `content-type` (instead of `null`);
//! - in **structured** mode the body is the event's JSON (the payload
//!   verbatim as its `data`), sent as `content-type:
//!   application/cloudevents+json`, without `ce-*` headers.
//!
//! Every other header of the table is sent either way, and the signature
//! covers the body as sent: a structured event is signed whole, and an
//! endpoint verifies it before it parses it.
//!
//! # The delivery headers are signed too
//!
//! Standard Webhooks signs the id, the timestamp and the body, not the
//! other headers. The `outbox-*` headers decide what an endpoint applies (a
//! fencing token set too high would make it refuse every later delivery of
//! the shard; another message id would apply a replay twice), so the sink
//! signs them as well, in `outbox-signature`: `v1,<base64 HMAC-SHA256>`
//! per key of `{id}.{timestamp}.outbox-delivery-headers-v1\n` followed by
//! one `name:value\n` line per header of
//! [`delivery_headers::ALL`](crate::delivery_headers::ALL), in that order
//! (empty for one not sent). An endpoint that does not know it ignores it;
//! `outbox_axum::webhook` refuses `outbox-*` headers it does not cover.
//!
//! # Key rotation
//!
//! [`WebhookKeys`] holds one key, or two (or more) during a rotation: the
//! sink signs with each, and an endpoint accepts a signature made with any
//! of its keys. Give the endpoint the new key next to the old one, then
//! the sink both, then the sink the new one alone, then the endpoint the
//! new one alone: nothing is refused on the way, and the old key is refused
//! from then on.
//!
//! # Answers, errors and the shard's backoff
//!
//! A `2xx` is a success (a `204` from an endpoint that had applied the
//! message already too). Everything else fails the delivery as a
//! [`WebhookError`]; which failures are *permanent* (rule 10: the message
//! is quarantined, or dead-lettered where its scope allows, until an
//! operator releases it) is in its table. A transient `429`, `503` or other
//! with `Retry-After` (seconds or an HTTP date) holds the shard for at
//! least that long ([`crate::retry_after`]), up to the backoff's cap; the
//! drain's outage probe (one delivery a second per endpoint that is down)
//! still runs. The client follows no redirects: a `3xx` is permanent (fix
//! the URL).
//!
//! Error messages show the endpoint without credentials, query or
//! fragment, and at most 256 bytes of a refusing body, escaped.

mod error;
mod secret;
mod signature;
mod sink;

pub use error::{WebhookError, WebhookSetupError};
pub use secret::{
    InvalidSecret, WebhookSecret, GENERATED_SECRET_LEN, MIN_SECRET_LEN, SECRET_PREFIX,
};
pub use signature::{
    VerifyError, WebhookKeys, DEFAULT_TOLERANCE, DELIVERY_SIGNATURE_HEADER, ID_HEADER,
    SIGNATURE_HEADER, TIMESTAMP_HEADER,
};
pub use sink::{SignedRequest, WebhookSink, DEFAULT_TIMEOUT, TRACEPARENT_HEADER};

/// The `reqwest` crate the sink is built on: use it to build a client for
/// [`WebhookSink::with_client`], so that the versions match.
pub use reqwest;
