//! The webhook sink (`outbox_core::sink::webhook`, feature `webhook`)
//! delivering through a real drain to a real HTTP server on 127.0.0.1:
//! what it sends (checked by a second implementation of Standard Webhooks,
//! the `standardwebhooks` crate), which answers are transient or
//! permanent (rule 10), `Retry-After`, timeouts and refused connections;
//! and our signatures against the other implementation's, both ways.

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use outbox_core::sink::webhook::{
    WebhookError, WebhookKeys, WebhookSecret, WebhookSink, ID_HEADER, SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
};
use outbox_core::store::StoreAdmin;
use outbox_core::{
    DeliveryError, DrainConfig, DrainReport, Drainer, ManualClock, MemoryStore, OutboxKind,
    Receivers, ShardKey,
};
use serde_json::json;
use tokio::sync::mpsc;

outbox_core::registry! {
    ShopScope = 0 (shard_field = "shop_id") {
        PriceChanged = 1 (no_coalesce),
    }
}

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A request the endpoint received.
struct Received {
    headers: HeaderMap,
    body: Bytes,
}

/// An endpoint on 127.0.0.1: `/ok` answers 204, `/status/{code}` that
/// status, `/retry-after/{value}` 429 with that `Retry-After`, `/hang`
/// never; each request is sent to the channel first.
struct Endpoint {
    base: String,
    received: mpsc::UnboundedReceiver<Received>,
}

impl Endpoint {
    async fn start() -> Self {
        let (sender, received) = mpsc::unbounded_channel();
        let sender = Arc::new(sender);
        let app = Router::new()
            .route("/ok", post(ok))
            .route("/status/{code}", post(status))
            .route("/retry-after/{value}", post(too_many))
            .route("/hang", post(hang))
            .with_state(sender);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { base, received }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn next(&mut self) -> Received {
        self.received.recv().await.unwrap()
    }
}

type Seen = State<Arc<mpsc::UnboundedSender<Received>>>;

async fn ok(State(seen): Seen, headers: HeaderMap, body: Bytes) -> StatusCode {
    seen.send(Received { headers, body }).unwrap();
    StatusCode::NO_CONTENT
}

async fn status(
    State(seen): Seen,
    Path(code): Path<u16>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    seen.send(Received { headers, body }).unwrap();
    let status = StatusCode::from_u16(code).unwrap();
    let mut response = (status, "refused: bad\0thing").into_response();
    if status.is_redirection() {
        response
            .headers_mut()
            .insert("location", "http://127.0.0.1:9/elsewhere".parse().unwrap());
    }
    response
}

async fn too_many(
    State(seen): Seen,
    Path(value): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    seen.send(Received { headers, body }).unwrap();
    (
        StatusCode::TOO_MANY_REQUESTS,
        [("retry-after", value)],
        "slow down",
    )
        .into_response()
}

async fn hang(State(seen): Seen, headers: HeaderMap, body: Bytes) -> StatusCode {
    seen.send(Received { headers, body }).unwrap();
    std::future::pending::<()>().await;
    StatusCode::NO_CONTENT
}

fn keys() -> WebhookKeys {
    WebhookKeys::parse(SECRET).unwrap()
}

fn shop(id: i64) -> ShardKey {
    ShardKey::region(OutboxScope::ShopScope, id)
}

/// A store with one message for shop 42, and a drainer delivering
/// `PriceChanged` through `sink` on a manual clock.
fn outbox(sink: &WebhookSink) -> (MemoryStore, Drainer<OutboxCategory>, ManualClock) {
    let clock = ManualClock::starting_now();
    let store = MemoryStore::new().with_clock(clock.clone());
    store.write(
        &shop(42),
        OutboxCategory::PriceChanged,
        7,
        Some(json!({ "cents": 990 })),
    );
    let receivers = Receivers::new().on(OutboxCategory::PriceChanged, sink.receiver());
    let drainer = Drainer::builder(store.clone(), receivers)
        .config(DrainConfig::default().recovery_batch(0))
        .clock(clock.clone())
        .build();
    (store, drainer, clock)
}

/// The `WebhookError` under a failed delivery.
fn webhook_error(error: &DeliveryError) -> &WebhookError {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = next {
        if let Some(found) = error.downcast_ref::<WebhookError>() {
            return found;
        }
        next = error.source();
    }
    panic!("no WebhookError under {error}")
}

fn the_failure(report: &DrainReport) -> &outbox_core::ShardFailure {
    assert_eq!(report.failures.len(), 1, "{report:?}");
    &report.failures[0]
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers.get(name).unwrap().to_str().unwrap()
}

#[tokio::test]
async fn a_drained_message_arrives_signed_and_another_implementation_verifies_it() {
    let mut endpoint = Endpoint::start().await;
    let sink = WebhookSink::new(&endpoint.url("/ok"), keys())
        .unwrap()
        .with_sender("shop-service");
    let (store, drainer, _) = outbox(&sink);
    store.write(&shop(43), OutboxCategory::PriceChanged, 8, None);
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 2, "{report:?}");
    assert!(store.rows(OutboxKind::Region).is_empty());

    let theirs = standardwebhooks::Webhook::new(SECRET).unwrap();
    let mut bodies = Vec::new();
    for _ in 0..2 {
        let Received { headers, body } = endpoint.next().await;
        theirs.verify(&body, &headers).unwrap();
        assert_eq!(header(&headers, "content-type"), "application/json");
        // The message id, for the endpoint's inbox and apply_once.
        let id = header(&headers, ID_HEADER);
        assert_eq!(id.parse::<uuid::Uuid>().unwrap().get_version_num(), 7);
        assert_eq!(header(&headers, "outbox-message-id"), id);
        assert!(header(&headers, "outbox-fence").parse::<i64>().unwrap() > 0);
        assert_eq!(header(&headers, "outbox-category"), "PriceChanged");
        assert_eq!(header(&headers, "outbox-sender"), "shop-service");
        // The delivery headers' own signature checks out, with our keys.
        let delivery: Vec<(&str, &str)> = outbox_core::delivery_headers::ALL
            .iter()
            .map(|name| (*name, header(&headers, name)))
            .collect();
        keys()
            .verify_delivery_headers(
                id,
                header(&headers, TIMESTAMP_HEADER).parse().unwrap(),
                &delivery,
                header(&headers, "outbox-signature"),
            )
            .unwrap();
        bodies.push((header(&headers, "outbox-shard").to_owned(), body));
    }
    bodies.sort();
    assert_eq!(
        bodies,
        vec![
            (
                "region:0/42".to_owned(),
                Bytes::from_static(br#"{"cents":990}"#)
            ),
            // No payload: JSON `null`.
            ("region:0/43".to_owned(), Bytes::from_static(b"null")),
        ]
    );
}

#[tokio::test]
async fn without_a_sender_only_the_message_id_goes_with_it() {
    let mut endpoint = Endpoint::start().await;
    let sink = WebhookSink::new(&endpoint.url("/ok"), keys()).unwrap();
    let (_, drainer, _) = outbox(&sink);
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    let Received { headers, .. } = endpoint.next().await;
    assert_eq!(
        header(&headers, "outbox-message-id"),
        header(&headers, ID_HEADER)
    );
    for absent in [
        "outbox-fence",
        "outbox-shard",
        "outbox-category",
        "outbox-sender",
    ] {
        assert!(headers.get(absent).is_none(), "{absent}");
    }
}

#[tokio::test]
async fn a_retry_carries_the_same_webhook_id_and_is_signed_again() {
    let mut endpoint = Endpoint::start().await;
    let failing = WebhookSink::new(&endpoint.url("/status/503"), keys()).unwrap();
    let (store, drainer, clock) = outbox(&failing);
    let failure = the_failure(&drainer.drain_due(OutboxKind::Region).await.unwrap()).retry_at;
    let first = endpoint.next().await;

    // The same rows, now to an endpoint that accepts.
    let sink = failing.with_url(&endpoint.url("/ok")).unwrap();
    let receivers = Receivers::new().on(OutboxCategory::PriceChanged, sink.receiver());
    let drainer = Drainer::builder(store.clone(), receivers)
        .clock(clock.clone())
        .build();
    clock.advance((failure - drainer.clock().now()).to_std().unwrap());
    assert_eq!(
        drainer
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .deliveries,
        1
    );
    let second = endpoint.next().await;
    assert_eq!(
        header(&first.headers, ID_HEADER),
        header(&second.headers, ID_HEADER)
    );
    assert_eq!(first.body, second.body);
    standardwebhooks::Webhook::new(SECRET)
        .unwrap()
        .verify(&second.body, &second.headers)
        .unwrap();
}

#[tokio::test]
async fn server_errors_timeouts_and_rate_limits_are_transient_other_refusals_permanent() {
    let mut endpoint = Endpoint::start().await;
    for (code, permanent) in [
        (500, false),
        (502, false),
        (503, false),
        (408, false),
        (429, false),
        (400, true),
        (401, true),
        (403, true),
        (404, true),
        (410, true),
        (422, true),
        (302, true),
        (307, true),
    ] {
        let sink = WebhookSink::new(&endpoint.url(&format!("/status/{code}")), keys()).unwrap();
        let (store, drainer, _) = outbox(&sink);
        let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
        endpoint.next().await;
        let failure = the_failure(&report);
        let error = webhook_error(&failure.error);
        assert_eq!(error.status().map(|s| s.as_u16()), Some(code));
        assert_eq!(failure.error.is_permanent(), permanent, "{code}: {error}");
        // Permanent: quarantined; transient: backing off.
        let state = &store.failing_shards(OutboxKind::Region, 10).await.unwrap()[0].state;
        assert_eq!(state.is_quarantined(), permanent, "{code}");
        assert_eq!(store.rows(OutboxKind::Region).len(), 1, "nothing lost");
        // What the endpoint said is in the error, escaped.
        assert!(
            error.to_string().contains(r#""refused: bad\0thing""#),
            "{error}"
        );
    }
}

#[tokio::test]
async fn a_429_holds_the_shard_for_its_retry_after() {
    let mut endpoint = Endpoint::start().await;
    for (value, expected) in [("120", 120), ("0", 1)] {
        let sink =
            WebhookSink::new(&endpoint.url(&format!("/retry-after/{value}")), keys()).unwrap();
        let (store, drainer, _) = outbox(&sink);
        let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
        endpoint.next().await;
        let failure = the_failure(&report);
        assert!(!failure.error.is_permanent());
        // Asked for 120 s: 120 s, not the first backoff's 1 s; asked for
        // none: the backoff.
        assert_eq!(
            (failure.retry_at - drainer.clock().now()).to_std().unwrap(),
            Duration::from_secs(expected),
            "{value}"
        );
        assert_eq!(store.rows(OutboxKind::Region).len(), 1);
    }
}

#[tokio::test]
async fn an_endpoint_that_does_not_answer_in_time_is_a_transient_timeout() {
    let mut endpoint = Endpoint::start().await;
    let sink = WebhookSink::new(&endpoint.url("/hang"), keys())
        .unwrap()
        .with_timeout(Duration::from_millis(200));
    let (store, drainer, _) = outbox(&sink);
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    endpoint.next().await;
    let failure = the_failure(&report);
    assert!(
        matches!(webhook_error(&failure.error), WebhookError::Timeout { .. }),
        "{}",
        failure.error
    );
    assert!(!failure.error.is_permanent());
    assert_eq!(store.rows(OutboxKind::Region).len(), 1);
}

#[tokio::test]
async fn a_refused_connection_is_transient_and_errors_show_no_credentials() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener); // nobody listens there now
    let url = format!("http://hook-user:hunter2@{address}/in?token=s3cret");
    let sink = WebhookSink::new(&url, keys()).unwrap();
    assert_eq!(sink.endpoint(), format!("http://{address}/in"));
    let (_, drainer, _) = outbox(&sink);
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    let failure = the_failure(&report);
    assert!(
        matches!(webhook_error(&failure.error), WebhookError::Connect { .. }),
        "{}",
        failure.error
    );
    assert!(!failure.error.is_permanent());
    let text = failure.error.to_string();
    assert!(
        !text.contains("hunter2") && !text.contains("s3cret"),
        "{text}"
    );
    assert!(!format!("{sink:?}").contains("hunter2"));
}

#[tokio::test]
async fn urls_that_cannot_be_endpoints_are_refused() {
    for url in ["not a url", "/relative", "ftp://example.invalid/x"] {
        assert!(WebhookSink::new(url, keys()).is_err(), "{url}");
    }
}

/// Ids, times and bodies to sign both ways.
fn cases() -> Vec<(String, i64, Vec<u8>)> {
    let mut cases = Vec::new();
    for (i, body) in [
        &b"{}"[..],
        br#"{"test": 2432232314}"#,
        b"null",
        "{\"name\":\"\u{fc}nicode \u{2713}\"}".as_bytes(),
        b"",
        &[b'x'; 4096][..],
    ]
    .into_iter()
    .enumerate()
    {
        let id = format!("msg_{i}_{}", uuid::Uuid::now_v7().simple());
        let at = 1_614_265_330 + i64::try_from(i).unwrap() * 7_919;
        cases.push((id, at, body.to_vec()));
    }
    cases
}

#[test]
fn we_sign_as_the_other_implementation_does() {
    let secrets = [
        SECRET.to_owned(),
        "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".to_owned(),
        WebhookSecret::generate().expose(),
    ];
    for secret in &secrets {
        let ours = WebhookKeys::parse(secret).unwrap();
        let theirs = standardwebhooks::Webhook::new(secret).unwrap();
        for (id, at, body) in cases() {
            assert_eq!(
                ours.sign(&id, at, &body),
                theirs.sign(&id, at, &body).unwrap()
            );
        }
    }
}

#[test]
fn each_verifies_what_the_other_signs_and_refuses_what_was_changed() {
    let secret = WebhookSecret::generate().expose();
    let ours = WebhookKeys::parse(&secret).unwrap();
    let theirs = standardwebhooks::Webhook::new(&secret).unwrap();
    let now = chrono::Utc::now().timestamp();
    for (id, _, body) in cases() {
        // Theirs signs, ours verifies (and refuses a flipped byte).
        let signature = theirs.sign(&id, now, &body).unwrap();
        assert!(ours
            .verify(&id, &now.to_string(), &signature, &body)
            .is_ok());
        let mut flipped = signature.clone().into_bytes();
        let last = flipped.len() - 3;
        flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).unwrap();
        assert!(ours.verify(&id, &now.to_string(), &flipped, &body).is_err());

        // Ours signs, theirs verifies (and refuses a changed body).
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(ID_HEADER, id.parse().unwrap());
        headers.insert(TIMESTAMP_HEADER, now.to_string().parse().unwrap());
        headers.insert(
            SIGNATURE_HEADER,
            ours.sign(&id, now, &body).parse().unwrap(),
        );
        theirs.verify(&body, &headers).unwrap();
        let mut changed = body.clone();
        changed.push(b' ');
        assert!(theirs.verify(&changed, &headers).is_err());
    }
}

#[test]
fn during_a_rotation_the_other_implementation_accepts_either_key() {
    let old = WebhookSecret::generate();
    let new = WebhookSecret::generate();
    let sender = WebhookKeys::new(new.clone()).with_key(old.clone());
    let now = chrono::Utc::now().timestamp();
    let mut headers = axum::http::HeaderMap::new();
    headers.insert(ID_HEADER, "msg_rotation".parse().unwrap());
    headers.insert(TIMESTAMP_HEADER, now.to_string().parse().unwrap());
    headers.insert(
        SIGNATURE_HEADER,
        sender.sign("msg_rotation", now, b"{}").parse().unwrap(),
    );
    for key in [&old, &new] {
        standardwebhooks::Webhook::new(&key.expose())
            .unwrap()
            .verify(b"{}", &headers)
            .unwrap();
    }
    let another = WebhookSecret::generate();
    assert!(standardwebhooks::Webhook::new(&another.expose())
        .unwrap()
        .verify(b"{}", &headers)
        .is_err());
}
