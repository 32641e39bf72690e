//! Signed delivery end to end: `outbox_core::sink::webhook::WebhookSink`
//! delivering through a real drain (a `MemoryStore` on the sending side)
//! to a real axum server on 127.0.0.1, whose route is behind
//! `outbox_axum::webhook::verify` and `apply_once` and takes `Verified<T>`,
//! its inbox on PostgreSQL and SQLite. Tampered, wrongly keyed, stale and
//! replayed requests are refused or applied once; a key rotation accepts
//! the old and the new key, then the new one only.

#![allow(missing_docs, clippy::unwrap_used)]

mod support;

use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::Response;
use axum::routing::post;
use axum::{Extension, Router};
use outbox_axum::apply_once::{apply_once, ApplyOnce};
use outbox_axum::webhook::{verify, Verified, WebhookKeys, WebhookSecret};
use outbox_axum::Tx;
use outbox_core::sink::webhook::WebhookSink;
use outbox_core::{
    DrainReport, Drainer, HandlerError, MemoryStore, Message, OutboxKind, Receivers, ShardKey,
};
use outbox_testing::database::DbBackend;
use sea_orm::{ConnectionTrait, Statement};
use support::{OutboxCategory, OutboxScope, TestApp};
use tokio::sync::mpsc;

#[derive(serde::Deserialize)]
struct WidgetHook {
    name: String,
}

/// The route: one widget per verified delivery, in the request's
/// transaction. Behind `verify`, the extractor still says what was signed:
/// the sink's `webhook-id` is the message id.
async fn create_widget(tx: Tx, Verified(hook, delivery): Verified<WidgetHook>) -> StatusCode {
    assert!(delivery.message_id().is_some(), "{delivery:?}");
    let backend = tx.get_database_backend();
    tx.execute_raw(Statement::from_sql_and_values(
        backend,
        "INSERT INTO widgets (organization_id, name) VALUES ($1, $2)",
        [1i64.into(), hook.name.into()],
    ))
    .await
    .unwrap();
    StatusCode::CREATED
}

/// A request as it arrived, to send again.
#[derive(Clone, Debug)]
struct Captured {
    headers: HeaderMap,
    body: Bytes,
}

/// Keeps each request as it arrived (outside everything else).
async fn capture(
    State(seen): State<mpsc::UnboundedSender<Captured>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let _ = seen.send(Captured {
        headers: parts.headers.clone(),
        body: body.clone(),
    });
    next.run(Request::from_parts(parts, Body::from(body))).await
}

/// The receiving silo: its database, and an HTTP server verifying with
/// `keys`.
struct Silo {
    app: TestApp,
    url: String,
    captured: mpsc::UnboundedReceiver<Captured>,
}

impl Silo {
    async fn start(backend: DbBackend, label: &str, keys: &WebhookKeys) -> Self {
        let app = TestApp::new(backend, label).await;
        let (url, captured) = serve(&app, keys).await;
        Self { app, url, captured }
    }

    async fn widgets(&self) -> i64 {
        self.app.widgets().await
    }
}

/// Serves `app`'s database behind a route verified with `keys`.
async fn serve(app: &TestApp, keys: &WebhookKeys) -> (String, mpsc::UnboundedReceiver<Captured>) {
    let (seen, captured) = mpsc::unbounded_channel();
    let router = Router::new()
        .route("/hooks/widgets", post(create_widget))
        .route_layer(from_fn_with_state(
            ApplyOnce::new("widget-hooks"),
            apply_once,
        ))
        .route_layer(from_fn_with_state(keys.clone(), verify))
        .layer(app.layer())
        .layer(from_fn_with_state(seen, capture));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks/widgets", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (url, captured)
}

fn org(id: i64) -> ShardKey {
    ShardKey::region(OutboxScope::OrganizationScope, id)
}

fn secret(text: &str) -> WebhookSecret {
    WebhookSecret::from_bytes(format!("{text} key of 24 bytes at least").into_bytes()).unwrap()
}

/// Writes a widget message named `name` for organization `org_id` and
/// drains it once through `sink`.
async fn deliver(store: &MemoryStore, sink: &WebhookSink, org_id: i64, name: &str) -> DrainReport {
    store.write(
        &org(org_id),
        OutboxCategory::OrganizationUpdate,
        org_id,
        Some(serde_json::json!({ "name": name })),
    );
    let receivers = Receivers::new()
        .on(OutboxCategory::OrganizationUpdate, sink.receiver())
        .discard(OutboxCategory::OrganizationAudit);
    Drainer::new(store.clone(), receivers)
        .drain_due(OutboxKind::Region)
        .await
        .unwrap()
}

/// Messages as the drain hands them out, without delivering them.
async fn messages(store: &MemoryStore, names: &[&str]) -> Vec<Message<OutboxCategory>> {
    let kept = Arc::new(Mutex::new(Vec::new()));
    for name in names {
        store.write(
            &org(1),
            OutboxCategory::OrganizationUpdate,
            1,
            Some(serde_json::json!({ "name": name })),
        );
        let keep = kept.clone();
        let receivers = Receivers::new()
            .on(
                OutboxCategory::OrganizationUpdate,
                move |message: Message<OutboxCategory>| {
                    keep.lock().unwrap().push(message);
                    async { Ok::<_, HandlerError>(()) }
                },
            )
            .discard(OutboxCategory::OrganizationAudit);
        Drainer::new(store.clone(), receivers)
            .drain_due(OutboxKind::Region)
            .await
            .unwrap();
    }
    let kept = kept.lock().unwrap().clone();
    kept
}

async fn send(url: &str, headers: &HeaderMap, body: impl Into<reqwest::Body>) -> StatusCode {
    reqwest::Client::new()
        .post(url)
        .headers(headers.clone())
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

async fn a_delivery_is_applied_once_and_a_changed_or_replayed_one_never(backend: DbBackend) {
    let keys = WebhookKeys::new(secret("region-us"));
    let mut silo = Silo::start(backend, "webhook_once", &keys).await;
    let sink = WebhookSink::new(&silo.url, keys.clone())
        .unwrap()
        .with_sender("control");
    let store = MemoryStore::new();
    let report = deliver(&store, &sink, 1, "a").await;
    assert_eq!(report.deliveries, 1, "{report:?}");
    assert!(store.rows(OutboxKind::Region).is_empty());
    assert_eq!(silo.widgets().await, 1);
    let delivered = silo.captured.recv().await.unwrap();

    // The same request again, inside the window: answered, not applied.
    assert_eq!(
        send(&silo.url, &delivered.headers, delivered.body.clone()).await,
        StatusCode::NO_CONTENT
    );
    // Without its outbox headers: still recorded by its signed webhook-id.
    let mut stripped = delivered.headers.clone();
    for name in outbox_core::delivery_headers::ALL {
        stripped.remove(name);
    }
    stripped.remove("outbox-signature");
    assert_eq!(
        send(&silo.url, &stripped, delivered.body.clone()).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(silo.widgets().await, 1);

    // Changed on the way: a body, a fencing token, a message id, a
    // signature byte.
    let changed_body = String::from_utf8(delivered.body.to_vec())
        .unwrap()
        .replace("\"a\"", "\"evil\"");
    assert_eq!(
        send(&silo.url, &delivered.headers, changed_body).await,
        StatusCode::UNAUTHORIZED
    );
    let mut high_fence = delivered.headers.clone();
    high_fence.insert("outbox-fence", "9223372036854775807".parse().unwrap());
    let mut new_id = delivered.headers.clone();
    new_id.insert(
        "outbox-message-id",
        "0190f3a4-0000-7000-8000-000000000009".parse().unwrap(),
    );
    let mut flipped = delivered.headers.clone();
    let signature = flipped["webhook-signature"].to_str().unwrap().to_owned();
    let i = signature.len() - 5;
    let byte = if &signature[i..=i] == "A" { "B" } else { "A" };
    flipped.insert(
        "webhook-signature",
        format!("{}{byte}{}", &signature[..i], &signature[i + 1..])
            .parse()
            .unwrap(),
    );
    for headers in [high_fence, new_id, flipped] {
        assert_eq!(
            send(&silo.url, &headers, delivered.body.clone()).await,
            StatusCode::UNAUTHORIZED
        );
    }
    // Missing and malformed headers.
    let mut unsigned = delivered.headers.clone();
    unsigned.remove("webhook-signature");
    let mut no_time = delivered.headers.clone();
    no_time.insert("webhook-timestamp", "soon".parse().unwrap());
    for headers in [unsigned, no_time] {
        assert_eq!(
            send(&silo.url, &headers, delivered.body.clone()).await,
            StatusCode::BAD_REQUEST
        );
    }
    assert_eq!(silo.widgets().await, 1, "nothing written twice");
    // The inbox kept the delivered fence, not the forged one.
    let (fences, superseded) = outbox_seaorm::inbox::fences(&silo.app.db.db, 10)
        .await
        .unwrap();
    assert_eq!(fences.len(), 1);
    assert_eq!(
        fences[0].fence.to_string(),
        delivered.headers["outbox-fence"].to_str().unwrap()
    );
    assert_eq!(superseded, 0);
}

async fn another_silos_key_and_stale_or_future_timestamps_are_refused(backend: DbBackend) {
    let keys = WebhookKeys::new(secret("region-us"));
    let silo = Silo::start(backend, "webhook_refused", &keys).await;

    // Signed with region eu's key: refused (401), so quarantined.
    let eu = WebhookSink::new(&silo.url, WebhookKeys::new(secret("region-eu"))).unwrap();
    let store = MemoryStore::new();
    let report = deliver(&store, &eu, 1, "from-eu").await;
    assert_eq!(report.failures.len(), 1, "{report:?}");
    assert!(
        report.failures[0].error.is_permanent(),
        "{:?}",
        report.failures[0]
    );
    assert!(
        report.failures[0].error.to_string().contains("401"),
        "{}",
        report.failures[0].error
    );
    assert_eq!(store.rows(OutboxKind::Region).len(), 1, "kept, quarantined");

    // Signed with the right key, at times around the window's edges (five
    // minutes each way): each case 30 s or more from the edge, as the
    // server reads its own clock later, and `now()` is in whole seconds.
    let sink = WebhookSink::new(&silo.url, keys)
        .unwrap()
        .with_sender("control");
    let message = messages(&MemoryStore::new(), &["timed"]).await.remove(0);
    for (offset, expected) in [
        (-330, StatusCode::UNAUTHORIZED),
        (330, StatusCode::UNAUTHORIZED),
        (-3_600, StatusCode::UNAUTHORIZED),
        (-240, StatusCode::CREATED),
    ] {
        let request = sink.signed_request(&message, now() + offset);
        assert_eq!(
            send(&silo.url, &request.headers, request.body).await,
            expected,
            "{offset}"
        );
    }
    assert_eq!(silo.widgets().await, 1);
}

async fn a_key_rotation_accepts_both_keys_then_refuses_the_old(backend: DbBackend) {
    let (old, new) = (secret("old"), secret("new"));
    let during = WebhookKeys::new(old.clone()).with_key(new.clone());
    let after = WebhookKeys::new(new.clone());
    let silo = Silo::start(backend, "webhook_rotation", &during).await;
    // The same database, served with the new key alone.
    let (after_url, _) = serve(&silo.app, &after).await;

    let sink = |url: &str, keys: &WebhookKeys| WebhookSink::new(url, keys.clone()).unwrap();
    let old_only = WebhookKeys::new(old);
    let both = WebhookKeys::new(new).with_key(secret("old"));
    let store = MemoryStore::new();
    // During the rotation: the old key, both, the new key alone.
    for (org_id, keys) in [(1, &old_only), (2, &both), (3, &after)] {
        let report = deliver(
            &store,
            &sink(&silo.url, keys),
            org_id,
            &format!("during-{org_id}"),
        )
        .await;
        assert_eq!(report.deliveries, 1, "{report:?}");
    }
    // After it: both and the new one are accepted, the old one refused.
    for (org_id, keys) in [(4, &both), (5, &after)] {
        let report = deliver(
            &store,
            &sink(&after_url, keys),
            org_id,
            &format!("after-{org_id}"),
        )
        .await;
        assert_eq!(report.deliveries, 1, "{report:?}");
    }
    let report = deliver(&store, &sink(&after_url, &old_only), 6, "after-old").await;
    assert_eq!(report.failures.len(), 1, "{report:?}");
    assert!(report.failures[0].error.is_permanent());
    assert_eq!(silo.widgets().await, 5);
}

async fn a_late_delivery_is_refused_by_its_fence_and_a_third_party_sender_is_applied_once(
    backend: DbBackend,
) {
    let keys = WebhookKeys::new(secret("region-us"));
    let silo = Silo::start(backend, "webhook_fence", &keys).await;
    let sink = WebhookSink::new(&silo.url, keys.clone())
        .unwrap()
        .with_sender("control");
    // Two claims of one shard: the first one's message arrives last (a
    // worker paused past its lease).
    let claimed = messages(&MemoryStore::new(), &["early", "newer"]).await;
    assert!(claimed[0].fence < claimed[1].fence);
    let newer = sink.signed_request(&claimed[1], now());
    assert_eq!(
        send(&silo.url, &newer.headers, newer.body).await,
        StatusCode::CREATED
    );
    let late = sink.signed_request(&claimed[0], now());
    assert_eq!(
        send(&silo.url, &late.headers, late.body).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(silo.widgets().await, 1);
    let (fences, superseded) = outbox_seaorm::inbox::fences(&silo.app.db.db, 10)
        .await
        .unwrap();
    assert_eq!((fences[0].fence, superseded), (claimed[1].fence, 1));

    // Another implementation's request, no outbox headers: applied once by
    // its webhook-id.
    let theirs = standardwebhooks::Webhook::from_bytes(
        "region-us key of 24 bytes at least".as_bytes().to_vec(),
    )
    .unwrap();
    let id = "0190f3a4-0000-7000-8000-0000000000aa";
    let body = br#"{"name":"third-party"}"#;
    let mut headers = HeaderMap::new();
    headers.insert("webhook-id", id.parse().unwrap());
    headers.insert("webhook-timestamp", now().to_string().parse().unwrap());
    headers.insert(
        "webhook-signature",
        theirs.sign(id, now(), body).unwrap().parse().unwrap(),
    );
    assert_eq!(
        send(&silo.url, &headers, &body[..]).await,
        StatusCode::CREATED
    );
    assert_eq!(
        send(&silo.url, &headers, &body[..]).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(silo.widgets().await, 2);
}

outbox_testing::on_both_backends!(
    a_delivery_is_applied_once_and_a_changed_or_replayed_one_never,
    another_silos_key_and_stale_or_future_timestamps_are_refused,
    a_key_rotation_accepts_both_keys_then_refuses_the_old,
    a_late_delivery_is_refused_by_its_fence_and_a_third_party_sender_is_applied_once,
);

/// Without the middleware, `Verified` verifies with the router's
/// `Extension<WebhookKeys>`, and says what is missing without one.
#[tokio::test]
async fn the_extractor_alone_verifies_with_the_extension_or_names_what_is_missing() {
    use tower::ServiceExt;
    async fn hook(Verified(value, delivery): Verified<serde_json::Value>) -> String {
        format!("{value} {} {}", delivery.id(), delivery.timestamp())
    }
    let keys = WebhookKeys::new(secret("solo"));
    let request = |at: i64| {
        let body = br#"{"n":1}"#;
        axum::http::Request::post("/hook")
            .header("webhook-id", "msg_1")
            .header("webhook-timestamp", at.to_string())
            .header("webhook-signature", keys.sign("msg_1", at, body))
            .body(Body::from(&body[..]))
            .unwrap()
    };
    let with_keys = Router::new()
        .route("/hook", post(hook))
        .layer(Extension(keys.clone()));
    let at = now();
    let response = with_keys.clone().oneshot(request(at)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = axum::body::to_bytes(response.into_body(), 1024)
        .await
        .unwrap();
    assert_eq!(body, format!(r#"{{"n":1}} msg_1 {at}"#), "what was signed");
    let response = with_keys.oneshot(request(now() - 400)).await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    let without = Router::new().route("/hook", post(hook));
    let response = without.oneshot(request(now())).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = axum::body::to_bytes(response.into_body(), 1024)
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&body).contains("Extension(webhook_keys)"),
        "{body:?}"
    );
}
