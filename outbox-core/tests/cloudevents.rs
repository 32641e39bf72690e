//! CloudEvents from the sinks (`outbox_core::sink::cloudevents`), read by
//! a second implementation of CloudEvents 1.0, the `cloudevents-sdk` crate:
//! the webhook sink's requests in binary and structured mode (as built,
//! and as a real HTTP server on 127.0.0.1 received them, still verified by
//! the `standardwebhooks` crate), and what the JetStream sink published to
//! a real `nats-server` (Debian's, started by
//! `outbox_testing::nats::NatsServer`), in both modes.

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::routing::post;
use axum::Router;
use cloudevents::event::SpecVersion;
use cloudevents::{AttributesReader, Event};
use outbox_core::sink::cloudevents::{CloudEvents, CloudEventsError};
use outbox_core::sink::jetstream::{async_nats, JetStreamSink, MESSAGE_ID_HEADER};
use outbox_core::sink::webhook::{WebhookKeys, WebhookSink};
use outbox_core::{
    Contract, Drainer, HandlerError, MemoryStore, Message, OutboxKind, Receivers, ShardKey,
};
use outbox_testing::nats::{read_stream, NatsServer};
use serde_json::json;
use tokio::sync::mpsc;

/// The payload of `PriceChanged`, version 2 of its contract.
#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct PriceV2 {
    pub cents: i64,
    pub currency: String,
}

impl Contract for PriceV2 {
    const VERSION: u32 = 2;
}

outbox_core::registry! {
    ShopScope = 0 (shard_field = "shop_id") {
        PriceChanged = 1 (payload = PriceV2, no_coalesce),
        ProductUpdate = 2 (no_coalesce),
    }
}

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SOURCE: &str = "https://shop.example.com/region/us";
const PREFIX: &str = "com.example.shop.";
const STREAM: &str = "OUTBOX";
/// The longest wait for one message when reading the stream back.
const READ_WAIT: Duration = Duration::from_secs(10);

fn keys() -> WebhookKeys {
    WebhookKeys::parse(SECRET).unwrap()
}

fn events() -> CloudEvents {
    CloudEvents::new(SOURCE)
        .unwrap()
        .with_type_prefix(PREFIX)
        .unwrap()
}

fn shop(id: i64) -> ShardKey {
    ShardKey::region(OutboxScope::ShopScope, id)
}

/// Writes the three kinds of message: typed with a version (shop 42,
/// object 7), untyped with a payload (shop 43, object 8), untyped without
/// one (shop 44, object 9).
fn write_three(store: &MemoryStore) {
    store
        .write_typed(
            &shop(42),
            outbox_categories::PriceChanged,
            7,
            &PriceV2 {
                cents: 990,
                currency: "EUR".into(),
            },
        )
        .unwrap();
    store.write(
        &shop(43),
        OutboxCategory::ProductUpdate,
        8,
        Some(json!({ "name": "caf\u{e9} cr\u{e8}me", "tags": ["a", "b"] })),
    );
    store.write(&shop(44), OutboxCategory::ProductUpdate, 9, None);
}

/// The three messages of [`write_three`], as a receiver gets them, by
/// object identifier.
async fn three_messages() -> Vec<Message<OutboxCategory>> {
    let store = MemoryStore::new();
    write_three(&store);
    let (sent, mut received) = mpsc::unbounded_channel();
    let keep = move |message: Message<OutboxCategory>| {
        sent.send(message).unwrap();
        async { Ok::<_, HandlerError>(()) }
    };
    let receivers = Receivers::new()
        .on(OutboxCategory::PriceChanged, keep.clone())
        .on(OutboxCategory::ProductUpdate, keep);
    let report = Drainer::new(store, receivers)
        .drain_due(OutboxKind::Region)
        .await
        .unwrap();
    assert_eq!(report.deliveries, 3, "{report:?}");
    let mut messages = Vec::new();
    while let Ok(message) = received.try_recv() {
        messages.push(message);
    }
    messages.sort_by_key(|message| message.object_identifier);
    assert_eq!(messages[0].payload_version, Some(2));
    assert_eq!(messages[1].payload_version, None);
    assert!(messages[2].payload.is_none());
    messages
}

/// What the event of `message` must be: every attribute, and the payload
/// as its data (none without one).
fn assert_event(event: &Event, message: &Message<OutboxCategory>) {
    assert_eq!(event.specversion(), SpecVersion::V10);
    assert_eq!(event.id(), message.message_id.to_string());
    assert_eq!(event.source(), SOURCE);
    let expected_type = match message.object_identifier {
        7 => "com.example.shop.PriceChanged.v2",
        _ => "com.example.shop.ProductUpdate",
    };
    assert_eq!(event.ty(), expected_type);
    assert_eq!(
        event.subject(),
        Some(message.object_identifier.to_string().as_str())
    );
    assert_eq!(event.time(), Some(&message.date_added));
    assert_eq!(event.dataschema(), None);
    assert_eq!(event.iter_extensions().count(), 0, "{event}");
    match &message.payload {
        Some(payload) => {
            assert_eq!(event.datacontenttype(), Some("application/json"));
            let data = serde_json::Value::try_from(event.data().unwrap().clone()).unwrap();
            assert_eq!(data, payload.to_value().unwrap());
        }
        None => {
            assert_eq!(event.datacontenttype(), None);
            assert!(event.data().is_none(), "{event}");
        }
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|value| value.to_str().unwrap())
}

#[tokio::test]
async fn binary_webhook_requests_are_events_whose_data_is_the_payload() {
    let sink = WebhookSink::new("http://127.0.0.1:9/hook", keys())
        .unwrap()
        .with_sender("shop-service")
        .with_cloudevents(events());
    let theirs = standardwebhooks::Webhook::new(SECRET).unwrap();
    let now = chrono::Utc::now().timestamp();
    for message in three_messages().await {
        let request = sink.signed_request(&message, now);
        let event = cloudevents::binding::http::to_event(&request.headers, request.body.clone())
            .unwrap_or_else(|error| panic!("{error}: {:?}", request.headers));
        assert_event(&event, &message);
        // The body is the payload as without CloudEvents; nothing without one.
        match &message.payload {
            Some(payload) => assert_eq!(request.body, payload.as_bytes()),
            None => {
                assert!(request.body.is_empty());
                assert_eq!(header(&request.headers, "content-type"), None);
            }
        }
        // Signed as ever, with the delivery headers.
        theirs.verify(&request.body, &request.headers).unwrap();
        assert_eq!(
            header(&request.headers, "webhook-id"),
            Some(event.id()),
            "the idempotency key is the event id"
        );
        assert_eq!(
            header(&request.headers, "outbox-sender"),
            Some("shop-service")
        );
        assert!(header(&request.headers, "outbox-signature").is_some());
    }
}

#[tokio::test]
async fn structured_webhook_requests_are_json_events_signed_as_sent() {
    let sink = WebhookSink::new("http://127.0.0.1:9/hook", keys())
        .unwrap()
        .with_cloudevents(events().structured());
    let theirs = standardwebhooks::Webhook::new(SECRET).unwrap();
    let now = chrono::Utc::now().timestamp();
    for message in three_messages().await {
        let request = sink.signed_request(&message, now);
        assert_eq!(
            header(&request.headers, "content-type"),
            Some("application/cloudevents+json")
        );
        assert!(
            !request
                .headers
                .keys()
                .any(|name| name.as_str().starts_with("ce-")),
            "structured mode sends no ce-* headers: {:?}",
            request.headers
        );
        // The event format, read by the SDK's serde and by its HTTP binding.
        let event: Event = serde_json::from_slice(&request.body).unwrap();
        assert_event(&event, &message);
        let bound =
            cloudevents::binding::http::to_event(&request.headers, request.body.clone()).unwrap();
        assert_event(&bound, &message);
        // The payload is embedded verbatim as the data.
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        match &message.payload {
            Some(payload) => assert_eq!(body["data"], payload.to_value().unwrap()),
            None => assert!(body.get("data").is_none(), "{body}"),
        }
        // The signature covers the event as sent; a changed byte fails it.
        theirs.verify(&request.body, &request.headers).unwrap();
        let mut changed = request.body.clone();
        changed.push(b' ');
        assert!(theirs.verify(&changed, &request.headers).is_err());
    }
}

#[tokio::test]
async fn without_cloudevents_the_webhook_sends_what_it_always_sent() {
    let plain = WebhookSink::new("http://127.0.0.1:9/hook", keys()).unwrap();
    assert!(plain.cloudevents().is_none());
    for message in three_messages().await {
        let request = plain.signed_request(&message, 1_700_000_000);
        assert_eq!(
            header(&request.headers, "content-type"),
            Some("application/json")
        );
        assert!(!request
            .headers
            .keys()
            .any(|name| name.as_str().starts_with("ce-")));
        let expected = message
            .payload
            .as_ref()
            .map_or(&b"null"[..], |payload| payload.as_bytes());
        assert_eq!(request.body, expected);
    }
}

/// A request the endpoint received.
struct Received {
    headers: HeaderMap,
    body: Bytes,
}

/// An endpoint on 127.0.0.1 that answers `204` to every `POST /hook`,
/// after sending the request to the returned channel; its URL.
async fn endpoint() -> (String, mpsc::UnboundedReceiver<Received>) {
    let (sender, received) = mpsc::unbounded_channel();
    let app = Router::new()
        .route(
            "/hook",
            post(
                |State(seen): State<Arc<mpsc::UnboundedSender<Received>>>,
                 headers: HeaderMap,
                 body: Bytes| async move {
                    seen.send(Received { headers, body }).unwrap();
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .with_state(Arc::new(sender));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, received)
}

#[tokio::test]
async fn delivered_webhooks_arrive_as_events_in_either_mode() {
    let theirs = standardwebhooks::Webhook::new(SECRET).unwrap();
    for structured in [false, true] {
        let (url, mut received) = endpoint().await;
        let events = if structured {
            events().structured()
        } else {
            events()
        };
        let sink = WebhookSink::new(&url, keys())
            .unwrap()
            .with_cloudevents(events);
        let store = MemoryStore::new();
        write_three(&store);
        let written = store.rows(OutboxKind::Region);
        let receivers = Receivers::new()
            .on(OutboxCategory::PriceChanged, sink.receiver())
            .on(OutboxCategory::ProductUpdate, sink.receiver());
        let report = Drainer::new(store.clone(), receivers)
            .drain_due(OutboxKind::Region)
            .await
            .unwrap();
        assert_eq!(report.deliveries, 3, "{report:?}");
        assert!(store.rows(OutboxKind::Region).is_empty());

        let mut seen = Vec::new();
        for _ in 0..3 {
            let Received { headers, body } = received.recv().await.unwrap();
            theirs.verify(&body, &headers).unwrap();
            let event = cloudevents::binding::http::to_event(&headers, body.to_vec())
                .unwrap_or_else(|error| panic!("{error}: {headers:?}"));
            let row = written
                .iter()
                .find(|row| row.message_id.to_string() == event.id())
                .unwrap();
            assert_eq!(event.source(), SOURCE);
            assert_eq!(
                event.subject(),
                Some(row.object_identifier.to_string().as_str())
            );
            assert_eq!(event.time(), Some(&row.date_added));
            let data = event
                .data()
                .map(|data| serde_json::Value::try_from(data.clone()).unwrap());
            let payload = row.payload.as_ref().map(|p| p.to_value().unwrap());
            assert_eq!(data, payload, "structured: {structured}");
            seen.push(event.ty().to_owned());
        }
        seen.sort();
        assert_eq!(
            seen,
            [
                "com.example.shop.PriceChanged.v2",
                "com.example.shop.ProductUpdate",
                "com.example.shop.ProductUpdate",
            ],
            "structured: {structured}"
        );
    }
}

/// A published message's headers as an HTTP header map, for the SDK's
/// HTTP binding (the NATS binding maps attributes to the same `ce-*`
/// names).
fn http_headers(message: &async_nats::Message) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, values) in message.headers.as_ref().unwrap().iter() {
        let name = HeaderName::from_bytes(AsRef::<[u8]>::as_ref(name)).unwrap();
        for value in values {
            headers.append(name.clone(), HeaderValue::from_str(value.as_str()).unwrap());
        }
    }
    headers
}

/// Publishes the three messages of [`write_three`] through `sink`'s
/// receiver to a fresh server; what the stream stored, each with the
/// message it was published for, by object identifier.
async fn published(
    sink: impl Fn(async_nats::jetstream::Context) -> JetStreamSink,
) -> Vec<(async_nats::Message, Message<OutboxCategory>)> {
    let server = NatsServer::start().unwrap();
    let jetstream = async_nats::jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let sink = sink(jetstream.clone());
    jetstream
        .create_stream(sink.stream_config(STREAM))
        .await
        .unwrap();
    let store = MemoryStore::new();
    write_three(&store);
    let (sent, mut received) = mpsc::unbounded_channel();
    let publish = sink.receiver();
    let keep = move |message: Message<OutboxCategory>| {
        sent.send(message.clone()).unwrap();
        publish(message)
    };
    let receivers = Receivers::new()
        .on(OutboxCategory::PriceChanged, keep.clone())
        .on(OutboxCategory::ProductUpdate, keep);
    let report = Drainer::new(store.clone(), receivers)
        .drain_due(OutboxKind::Region)
        .await
        .unwrap();
    assert_eq!(report.deliveries, 3, "{report:?}");
    assert!(store.rows(OutboxKind::Region).is_empty());
    let mut delivered = Vec::new();
    while let Ok(message) = received.try_recv() {
        delivered.push(message);
    }
    let stored = read_stream(sink.context(), STREAM, READ_WAIT)
        .await
        .unwrap();
    assert_eq!(stored.len(), 3);
    let mut pairs: Vec<_> = stored
        .into_iter()
        .map(|published| {
            let id = published
                .headers
                .as_ref()
                .and_then(|headers| headers.get(MESSAGE_ID_HEADER))
                .unwrap()
                .as_str()
                .to_owned();
            let message = delivered
                .iter()
                .find(|message| message.message_id.to_string() == id)
                .unwrap()
                .clone();
            (published, message)
        })
        .collect();
    pairs.sort_by_key(|(_, message)| message.object_identifier);
    pairs
}

#[tokio::test]
async fn jetstream_messages_carry_the_event_in_ce_headers_and_the_payload_as_body() {
    let pairs =
        published(|jetstream| JetStreamSink::new(jetstream).with_cloudevents(events())).await;
    for (published, message) in &pairs {
        let headers = http_headers(published);
        let event = cloudevents::binding::http::to_event(&headers, published.payload.to_vec())
            .unwrap_or_else(|error| panic!("{error}: {headers:?}"));
        assert_event(&event, message);
        // The NATS binding's name for `datacontenttype`; the body unchanged.
        match &message.payload {
            Some(payload) => {
                assert_eq!(
                    header(&headers, "ce-datacontenttype"),
                    Some("application/json")
                );
                assert_eq!(published.payload.as_ref(), payload.as_bytes());
            }
            None => assert!(published.payload.is_empty()),
        }
        // The sink's own headers are still there.
        assert_eq!(header(&headers, "nats-msg-id"), Some(event.id()));
        assert_eq!(
            header(&headers, "outbox-object"),
            Some(message.object_identifier.to_string().as_str())
        );
    }
}

#[tokio::test]
async fn jetstream_messages_in_structured_mode_are_json_events() {
    let pairs = published(|jetstream| {
        JetStreamSink::new(jetstream).with_cloudevents(events().structured())
    })
    .await;
    for (published, message) in &pairs {
        let headers = http_headers(published);
        assert_eq!(
            header(&headers, "content-type"),
            Some("application/cloudevents+json")
        );
        assert!(header(&headers, "ce-id").is_none());
        let event: Event = serde_json::from_slice(&published.payload).unwrap();
        assert_event(&event, message);
        let bound =
            cloudevents::binding::http::to_event(&headers, published.payload.to_vec()).unwrap();
        assert_event(&bound, message);
        assert_eq!(header(&headers, "nats-msg-id"), Some(event.id()));
    }
}

#[test]
fn a_source_or_type_prefix_that_cannot_be_sent_is_refused_when_made() {
    assert!(matches!(
        CloudEvents::new(""),
        Err(CloudEventsError::EmptySource)
    ));
    for bad in ["shop service", "/caf\u{e9}", "/50%", "<shop>"] {
        assert!(
            matches!(
                CloudEvents::new(bad),
                Err(CloudEventsError::InvalidSource { .. })
            ),
            "{bad}"
        );
    }
    let error = CloudEvents::new("/shop")
        .unwrap()
        .with_type_prefix("com.example shop.")
        .unwrap_err();
    assert!(
        matches!(error, CloudEventsError::InvalidTypePrefix { .. }),
        "{error}"
    );
    // What it says names the fix.
    let message = CloudEventsError::EmptySource.to_string();
    assert!(message.contains("URI-reference"), "{message}");
}
