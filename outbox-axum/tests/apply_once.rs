//! `outbox_axum::apply_once` on PostgreSQL and SQLite: a route behind it
//! applies each delivery once, refuses one superseded by a newer claim of
//! its shard (and counts it), refuses malformed headers with 400; and
//! `delivery_headers` carries what a receiver is delivering.

#![allow(missing_docs, clippy::unwrap_used)]

mod support;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::middleware;
use outbox_axum::apply_once::{
    apply_once, delivery_headers, ApplyOnce, CATEGORY_HEADER, FENCE_HEADER, MESSAGE_ID_HEADER,
    SENDER_HEADER, SHARD_HEADER,
};
use outbox_core::{Drainer, MemoryStore, Message, OutboxKind, Receivers, ShardKey};
use outbox_testing::database::DbBackend;
use support::{OutboxCategory, OutboxScope, TestApp};
use tower::ServiceExt;

/// One call to the guarded route, creating widget `name`, with `headers`.
async fn call(app: &axum::Router, name: &str, headers: &[(&str, String)]) -> StatusCode {
    let mut request = Request::post(format!("/widgets/1/{name}"));
    for (header, value) in headers {
        request = request.header(*header, value);
    }
    app.clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap()
        .status()
}

fn delivery(id: &str, token: i64) -> Vec<(&'static str, String)> {
    vec![
        (MESSAGE_ID_HEADER, id.to_owned()),
        (FENCE_HEADER, token.to_string()),
        (SHARD_HEADER, "region:0/1".to_owned()),
        (CATEGORY_HEADER, "OrganizationUpdate".to_owned()),
        (SENDER_HEADER, "control".to_owned()),
    ]
}

const FIRST: &str = "0190f3a4-0000-7000-8000-000000000001";
const SECOND: &str = "0190f3a4-0000-7000-8000-000000000002";
const THIRD: &str = "0190f3a4-0000-7000-8000-000000000003";

async fn a_delivery_is_applied_once_and_never_after_a_newer_claim(backend: DbBackend) {
    let app = TestApp::new(backend, "apply_once").await;
    let router = app
        .routes()
        .route_layer(middleware::from_fn_with_state(
            ApplyOnce::new("rpc"),
            apply_once,
        ))
        .layer(app.layer());

    // The first delivery of a message runs the route; again, it does not.
    assert_eq!(
        call(&router, "a", &delivery(FIRST, 10)).await,
        StatusCode::CREATED
    );
    assert_eq!(
        call(&router, "a-again", &delivery(FIRST, 10)).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(app.widgets().await, 1);
    // A newer claim's message is applied; then a late one from an older
    // claim (a worker paused past its lease) is refused, and counted.
    assert_eq!(
        call(&router, "b", &delivery(SECOND, 12)).await,
        StatusCode::CREATED
    );
    assert_eq!(
        call(&router, "late", &delivery(THIRD, 11)).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(app.widgets().await, 2);
    let (records, superseded) = outbox_seaorm::inbox::fences(&app.db.db, 10).await.unwrap();
    assert_eq!(superseded, 1);
    assert_eq!((records[0].fence.get(), records[0].superseded), (12, 1));

    // Bad headers: 400, nothing applied; no headers: the route runs as is.
    let mut without_sender = delivery(THIRD, 13);
    without_sender.retain(|(header, _)| *header != SENDER_HEADER);
    let mut not_a_token = delivery(THIRD, 13);
    not_a_token[1].1 = "soon".to_owned();
    for headers in [
        vec![(MESSAGE_ID_HEADER, "not-a-uuid".to_owned())],
        without_sender,
        not_a_token,
    ] {
        assert_eq!(
            call(&router, "bad", &headers).await,
            StatusCode::BAD_REQUEST,
            "{headers:?}"
        );
    }
    assert_eq!(call(&router, "by-hand", &[]).await, StatusCode::CREATED);
    assert_eq!(app.widgets().await, 3);
}

async fn without_the_outbox_layer_the_route_is_refused_with_the_reason(backend: DbBackend) {
    let app = TestApp::new(backend, "apply_once_no_layer").await;
    let router = app.routes().route_layer(middleware::from_fn_with_state(
        ApplyOnce::new("rpc"),
        apply_once,
    ));
    assert_eq!(
        call(&router, "a", &delivery(FIRST, 1)).await,
        StatusCode::INTERNAL_SERVER_ERROR
    );
}

outbox_testing::on_both_backends!(
    a_delivery_is_applied_once_and_never_after_a_newer_claim,
    without_the_outbox_layer_the_route_is_refused_with_the_reason,
);

/// Inside a receiver, the headers carry the delivery; outside, none.
#[tokio::test]
async fn delivery_headers_carry_the_current_delivery() {
    assert!(delivery_headers("control").is_empty());
    let store = MemoryStore::new();
    let shard = ShardKey::region(OutboxScope::OrganizationScope, 5);
    store.write(&shard, OutboxCategory::OrganizationUpdate, 9, None);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let captured = seen.clone();
    let receivers = Receivers::new()
        .on(
            OutboxCategory::OrganizationUpdate,
            move |message: Message<OutboxCategory>| {
                let captured = captured.clone();
                async move {
                    captured.lock().unwrap().push((
                        message,
                        delivery_headers("control"),
                        delivery_headers(""),
                    ));
                    Ok::<_, outbox_core::HandlerError>(())
                }
            },
        )
        .discard(OutboxCategory::OrganizationAudit);
    let report = Drainer::new(store, receivers)
        .drain_due(OutboxKind::Region)
        .await
        .unwrap();
    assert_eq!(report.deliveries, 1);
    let seen = seen.lock().unwrap();
    let (message, headers, anonymous) = &seen[0];
    let text = |name: &str| headers.get(name).unwrap().to_str().unwrap().to_owned();
    assert_eq!(text(MESSAGE_ID_HEADER), message.message_id.to_string());
    assert_eq!(text(FENCE_HEADER), message.fence.to_string());
    assert_eq!(text(SHARD_HEADER), shard.to_string());
    assert_eq!(text(CATEGORY_HEADER), "OrganizationUpdate");
    assert_eq!(text(SENDER_HEADER), "control");
    assert_eq!(anonymous.len(), 1, "no sender: the message id only");
}
