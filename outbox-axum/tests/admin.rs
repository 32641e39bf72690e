//! The admin router: authorisation, typed errors on bad input, and runtime
//! controls that hold across processes (two pools on one database).

#![allow(missing_docs, clippy::unwrap_used)]

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use axum::extract::ConnectInfo;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use outbox_axum::admin::{Admin, BearerToken, ClientAddress};
use outbox_core::store::StoreAdmin;
use outbox_core::{Drainer, DrainerBuilder, OutboxKind};
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, SeaOrmStore, ShardId};
use outbox_testing::database::{DbBackend, TestDatabase};
use serde_json::{json, Value};
use tower::ServiceExt;

outbox_core::registry! {
    OrganizationScope = 0 (shard_field = "organization_id") {
        OrganizationUpdate = 1,
    }
}

type Recorder = outbox_testing::Recorder<OutboxCategory>;

const TOKEN: &str = "the admin test's operator token!!";
/// The viewer's token: reads, never changes.
const VIEWER_TOKEN: &str = "the admin test's viewer token!!!!";

#[path = "admin/head.rs"]
mod head;
#[path = "admin/history.rs"]
mod history;
#[path = "admin/horizon.rs"]
mod horizon;
#[path = "admin/metrics.rs"]
mod metrics;
#[path = "admin/names.rs"]
mod names;
#[path = "admin/openapi.rs"]
mod openapi;
use head::a_blocked_shards_head_is_shown_and_set_aside;
use openapi::{the_asyncapi_document_is_served, the_openapi_document_covers_every_route};
#[path = "admin/roles.rs"]
mod roles;
use history::the_history_route_merges_every_workers_samples;
use names::scopes_and_categories_are_named_beside_their_numbers;
use roles::{
    a_viewer_reads_and_every_change_is_refused_and_recorded,
    operators_actions_are_recorded_with_who_why_and_how_they_ended,
};

/// A request body: content type and text.
type RequestBody<'a> = Option<(&'a str, &'a str)>;

/// The client every test request comes from, unless it says otherwise (as
/// a server run with `into_make_service_with_connect_info` gives it).
const CLIENT: ([u8; 4], u16) = ([192, 0, 2, 1], 40_000);

/// `router` as served: each request with its client's address.
fn served(router: Router) -> Router {
    router.layer(MockConnectInfo(SocketAddr::from(CLIENT)))
}

async fn call(
    router: &Router,
    method: Method,
    uri: &str,
    token: Option<&str>,
    body: RequestBody<'_>,
) -> (StatusCode, Value) {
    call_from(router, None, method, uri, token, body).await
}

/// [`call`] from `client` (else [`CLIENT`]).
async fn call_from(
    router: &Router,
    client: Option<SocketAddr>,
    method: Method,
    uri: &str,
    token: Option<&str>,
    body: RequestBody<'_>,
) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(client) = client {
        request = request.extension(ConnectInfo(client));
    }
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = match body {
        Some((content_type, body)) => request
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from(body.to_owned())),
        None => request.body(Body::empty()),
    }
    .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&bytes)))
    };
    (status, value)
}

async fn write(db: &TestDatabase, organization: i64) {
    write_region(
        &db.db,
        OutboxMessage::new(
            OutboxCategory::OrganizationUpdate,
            ShardId(organization),
            ObjectId(organization),
        )
        .with_payload(json!({ "v": organization })),
    )
    .await
    .unwrap();
}

/// A fresh database with rows for `organizations`, a drainer over it and
/// its admin router behind [`TOKEN`].
struct Setup {
    db: TestDatabase,
    recorder: Recorder,
    drainer: Drainer<OutboxCategory>,
    router: Router,
}

async fn setup(backend: DbBackend, label: &str, organizations: &[i64]) -> Setup {
    setup_with(backend, label, organizations, |drainer| drainer).await
}

async fn setup_with(
    backend: DbBackend,
    label: &str,
    organizations: &[i64],
    tune: impl FnOnce(DrainerBuilder<OutboxCategory>) -> DrainerBuilder<OutboxCategory>,
) -> Setup {
    let db = TestDatabase::of(backend, label).await.unwrap();
    for &organization in organizations {
        write(&db, organization).await;
    }
    let recorder = Recorder::new();
    let drainer = tune(Drainer::builder(
        SeaOrmStore::new(db.db.clone()).unwrap(),
        recorder.receivers(),
    ))
    .build();
    let router = served(
        Admin::new(drainer.clone()).router(
            BearerToken::new(TOKEN)
                .unwrap()
                .viewer("on-call", VIEWER_TOKEN)
                .unwrap(),
        ),
    );
    Setup {
        db,
        recorder,
        drainer,
        router,
    }
}

/// No control was set and the one row written is still pending.
async fn nothing_changed(db: &TestDatabase) {
    assert!(db.store().controls().await.unwrap().is_empty());
    assert_eq!(
        db.store().pending_count(OutboxKind::Region).await.unwrap(),
        1
    );
}

fn pause_body(identifier: i64) -> String {
    json!({
        "target": { "kind": "region", "scope": 0, "identifier": identifier },
        "action": "pause",
        "reason": "investigating"
    })
    .to_string()
}

/// The admin router over `drainer`, with the test's tokens and `failures`
/// wrong credentials allowed a minute.
fn router_allowing(drainer: &Drainer<OutboxCategory>, failures: u32) -> Router {
    served(admin_allowing(drainer, failures).router(tokens()))
}

fn admin_allowing(drainer: &Drainer<OutboxCategory>, failures: u32) -> Admin<OutboxCategory> {
    Admin::new(drainer.clone()).login_throttle(failures, std::time::Duration::from_secs(60))
}

fn tokens() -> BearerToken {
    BearerToken::new(TOKEN)
        .unwrap()
        .viewer("on-call", VIEWER_TOKEN)
        .unwrap()
}

/// Every route refuses a request without the token (or with a wrong one)
/// with 401 and a JSON error, and changes nothing.
async fn unauthorised_requests_get_401_and_change_nothing(backend: DbBackend) {
    let Setup { db, drainer, .. } = setup(backend, "admin_unauthorised", &[1]).await;
    let router = router_allowing(&drainer, 1000);
    let pause = pause_body(1);
    for (method, uri, body) in every_route(&pause) {
        for token in [None, Some("wrong"), Some("")] {
            let (status, error) = call(&router, method.clone(), uri, token, body).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {uri} {token:?}");
            assert_eq!(error["error"]["code"], "unauthorized");
        }
    }
    nothing_changed(&db).await;
}

/// After ten wrong credentials a client's next requests are refused with
/// `429` and `Retry-After` before they are checked, the right token too;
/// requests without credentials do not count.
async fn wrong_credentials_are_throttled(backend: DbBackend) {
    let Setup { db, drainer, .. } = setup(backend, "admin_throttled", &[1]).await;
    let router = router_allowing(&drainer, 10);
    for _ in 0..20 {
        let (status, _) = call(&router, Method::GET, "/health", None, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    for attempt in 0..10 {
        let (status, _) = call(&router, Method::GET, "/health", Some("wrong"), None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "attempt {attempt}");
    }
    let pause = pause_body(1);
    let put = Some(("application/json", pause.as_str()));
    let (status, error) = call(&router, Method::PUT, "/controls", Some(TOKEN), put).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{error}");
    assert_eq!(error["error"]["code"], "too_many_attempts");
    let response = router
        .clone()
        .oneshot(
            Request::builder()
                .uri("/health")
                .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let retry_after: u64 = response.headers()[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    nothing_changed(&db).await;
    // Another router (another process) has its own count.
    let fresh = router_allowing(&drainer, 10);
    let (status, _) = call(&fresh, Method::GET, "/health", Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::OK);
}

/// A guesser's failures refuse the guesser only: an operator at another
/// address (IPv4, or another IPv6 /64) gets in with the right token, while
/// the guesser's other addresses in its /64 are refused too.
async fn one_clients_failures_never_lock_out_another(backend: DbBackend) {
    let Setup { db, drainer, .. } = setup(backend, "admin_throttle_isolation", &[1]).await;
    let router = router_allowing(&drainer, 10);
    let guesser: SocketAddr = "[2001:db8:1:2::1]:5000".parse().unwrap();
    let same_64: SocketAddr = "[2001:db8:1:2::ffff]:5001".parse().unwrap();
    let operator_v6: SocketAddr = "[2001:db8:1:3::1]:5000".parse().unwrap();
    let operator_v4: SocketAddr = "198.51.100.7:5000".parse().unwrap();
    let health =
        |client, token| call_from(&router, Some(client), Method::GET, "/health", token, None);
    for attempt in 0..10 {
        let (status, _) = health(guesser, Some("wrong")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "attempt {attempt}");
    }
    assert_eq!(
        health(guesser, Some(TOKEN)).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        health(same_64, Some(TOKEN)).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    for operator in [operator_v6, operator_v4] {
        let (status, body) = health(operator, Some(TOKEN)).await;
        assert_eq!(status, StatusCode::OK, "{operator}: {body}");
    }
    nothing_changed(&db).await;
}

/// Served without the client's address, the router refuses every checked
/// request (500, the fix in the log) rather than count every client's
/// failures together; behind a trusted proxy, clients are told apart by
/// the header it sets, and a request without it is refused.
async fn the_client_address_is_required_or_taken_from_the_trusted_header(backend: DbBackend) {
    let Setup { db, drainer, .. } = setup(backend, "admin_client_address", &[1]).await;
    let bare = admin_allowing(&drainer, 10).router(tokens());
    for token in [Some(TOKEN), Some("wrong"), None] {
        let (status, error) = call(&bare, Method::GET, "/health", token, None).await;
        assert_eq!(
            status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "{token:?}: {error}"
        );
        assert_eq!(error["error"]["code"], "no_client_address");
    }

    let proxied = admin_allowing(&drainer, 10)
        .client_address(ClientAddress::trusted_header("x-forwarded-for"))
        .router(tokens());
    let from = |forwarded: Option<&'static str>, token: &'static str| {
        let mut request =
            Request::get("/health").header(header::AUTHORIZATION, format!("Bearer {token}"));
        if let Some(forwarded) = forwarded {
            request = request.header("x-forwarded-for", forwarded);
        }
        let request = request.body(Body::empty()).unwrap();
        let proxied = proxied.clone();
        async move { proxied.oneshot(request).await.unwrap().status() }
    };
    for _ in 0..10 {
        // The proxy appends the address it saw: the last one counts.
        assert_eq!(
            from(Some("198.51.100.1, 203.0.113.5"), "wrong").await,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(
        from(Some("203.0.113.5"), TOKEN).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        from(Some("203.0.113.5, 198.51.100.1"), TOKEN).await,
        StatusCode::OK
    );
    assert_eq!(from(None, TOKEN).await, StatusCode::BAD_REQUEST);
    nothing_changed(&db).await;
}

/// A route of the application's own behind `require_principal` (a
/// `/metrics` scrape) lets in either role, refuses others with 401, and
/// counts their failures with the admin router's: a guesser locked out
/// on one is locked out on the other.
async fn routes_behind_require_principal_share_the_throttle(backend: DbBackend) {
    let Setup { drainer, .. } = setup(backend, "admin_require_principal", &[1]).await;
    let admin = admin_allowing(&drainer, 10);
    let metrics = Router::new()
        .route(
            "/metrics",
            axum::routing::get(
                |principal: axum::Extension<outbox_axum::admin::Principal>| async move {
                    axum::Json(json!({ "scraped_by": principal.name() }))
                },
            ),
        )
        .route_layer(admin.require_principal(tokens()));
    let app = served(metrics.nest("/admin", admin.router(tokens())));
    let (status, body) = call(&app, Method::GET, "/metrics", Some(VIEWER_TOKEN), None).await;
    assert_eq!(
        (status, &body["scraped_by"]),
        (StatusCode::OK, &json!("on-call"))
    );
    for token in [None, Some("wrong")] {
        let (status, error) = call(&app, Method::GET, "/metrics", token, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{token:?}");
        assert_eq!(error["error"]["code"], "unauthorized");
    }
    // One wrong token above; nine on the admin routes use up the ten.
    for _ in 0..9 {
        let (status, _) = call(&app, Method::GET, "/admin/health", Some("wrong"), None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    let (status, _) = call(&app, Method::GET, "/metrics", Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
}

/// Every answer, refusals too, is neither cached nor framed.
async fn answers_are_not_cached_or_framed(backend: DbBackend) {
    let Setup { router, .. } = setup(backend, "admin_headers", &[1]).await;
    for token in [Some(TOKEN), None] {
        let mut request = Request::builder().uri("/shards");
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let response = router
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let headers = response.headers();
        assert_eq!(headers[header::CACHE_CONTROL], "no-store", "{token:?}");
        assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY");
        assert!(headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .contains("frame-ancestors 'none'"));
    }
}

/// Every JSON route of the admin API with a well-formed request, changes
/// (`PUT /controls` with `pause`) and reads alike.
fn every_route(pause: &str) -> Vec<(Method, &'static str, RequestBody<'_>)> {
    let json = "application/json";
    vec![
        (Method::GET, "/health", None),
        (Method::GET, "/shards", None),
        (
            Method::POST,
            "/shards/retry",
            Some((
                json,
                r#"{"shards":[{"kind":"region","scope":0,"identifier":1}]}"#,
            )),
        ),
        (Method::GET, "/controls", None),
        (Method::PUT, "/controls", Some((json, pause))),
        (
            Method::DELETE,
            "/controls",
            Some((
                json,
                r#"{"target":{"kind":"region","scope":0,"identifier":1}}"#,
            )),
        ),
        (Method::GET, "/dead-letters", None),
        (
            Method::POST,
            "/dead-letters/replay",
            Some((json, r#"{"kind":"region","ids":[1]}"#)),
        ),
        (
            Method::POST,
            "/dead-letters/discard",
            Some((json, r#"{"kind":"region","ids":[1]}"#)),
        ),
        (Method::GET, "/audit", None),
        (
            Method::GET,
            "/shards/head?kind=region&scope=0&identifier=1",
            None,
        ),
        (
            Method::POST,
            "/shards/set-aside",
            Some((
                json,
                r#"{"shard":{"kind":"region","scope":0,"identifier":1},"reason":"r"}"#,
            )),
        ),
    ]
}

/// Bad input is a typed 4xx and changes nothing: malformed JSON, the wrong
/// content type, unknown fields, actions, kinds and shards, a region on
/// the region outbox, limits out of range.
async fn bad_input_gets_a_typed_error_and_changes_nothing(backend: DbBackend) {
    let Setup { db, router, .. } = setup(backend, "admin_bad_input", &[1]).await;
    let json = "application/json";
    let token = Some(TOKEN);
    let cases: Vec<(Method, &str, RequestBody<'_>, StatusCode, &str)> = vec![
        (
            Method::PUT,
            "/controls",
            Some((json, "{not json")),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::PUT,
            "/controls",
            Some(("text/plain", "{}")),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        ),
        (
            Method::PUT,
            "/controls",
            Some((
                json,
                r#"{"target":{"kind":"region","scope":0},"action":"explode"}"#,
            )),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
        ),
        (
            Method::PUT,
            "/controls",
            Some((
                json,
                r#"{"target":{"kind":"moon","scope":0},"action":"pause"}"#,
            )),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
        ),
        (
            Method::PUT,
            "/controls",
            Some((
                json,
                r#"{"target":{"kind":"region","scope":0,"colour":1},"action":"pause"}"#,
            )),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
        ),
        (
            Method::PUT,
            "/controls",
            Some((
                json,
                r#"{"target":{"kind":"region","region":"us","scope":0},"action":"pause"}"#,
            )),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::PUT,
            "/controls",
            Some((
                json,
                r#"{"target":{"kind":"control","scope":0},"action":"pause"}"#,
            )),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::DELETE,
            "/controls",
            Some((
                json,
                r#"{"target":{"kind":"region","scope":0,"identifier":7}}"#,
            )),
            StatusCode::NOT_FOUND,
            "unknown_control",
        ),
        (
            Method::POST,
            "/shards/retry",
            Some((
                json,
                r#"{"shards":[{"kind":"region","scope":0,"identifier":7}]}"#,
            )),
            StatusCode::NOT_FOUND,
            "unknown_shard",
        ),
        (
            Method::POST,
            "/shards/retry",
            Some((json, r#"{"shards":[]}"#)),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::POST,
            "/dead-letters/replay",
            Some((json, r#"{"kind":"region","ids":[12345]}"#)),
            StatusCode::NOT_FOUND,
            "unknown_dead_letters",
        ),
        (
            Method::POST,
            "/dead-letters/discard",
            Some((json, r#"{"kind":"region","ids":[]}"#)),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/shards?kind=moon",
            None,
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/shards?limit=0",
            None,
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/dead-letters?limit=100000",
            None,
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
    ];
    for (method, uri, body, status, code) in cases {
        let (got, error) = call(&router, method.clone(), uri, token, body).await;
        assert_eq!(
            (got, error["error"]["code"].as_str()),
            (status, Some(code)),
            "{method} {uri} {body:?}: {error}"
        );
        assert!(error["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    nothing_changed(&db).await;
}

/// A pause set through the admin API of one process stops delivery by a
/// worker of another (its own pool on the same database), shows in the
/// shards view, and lifting it lets the row through.
async fn a_pause_through_the_admin_api_holds_in_another_process(backend: DbBackend) {
    let Setup {
        db,
        recorder,
        router,
        ..
    } = setup(backend, "admin_pause", &[1, 2]).await;
    let clock = outbox_core::ManualClock::starting_now();
    let elsewhere = Drainer::builder(
        SeaOrmStore::new(db.connect_again(2).await.unwrap()).unwrap(),
        recorder.receivers(),
    )
    .clock(clock.clone())
    .build();
    let json = "application/json";
    let pause = pause_body(1);
    let (status, control) = call(
        &router,
        Method::PUT,
        "/controls",
        Some(TOKEN),
        Some((json, &pause)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{control}");
    assert_eq!(control["action"], "pause");
    assert_eq!(control["reason"], "investigating");

    let report = elsewhere.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 1, "organization 2 only");
    let (_, shards) = call(&router, Method::GET, "/shards", Some(TOKEN), None).await;
    assert_eq!(
        shards["pending"],
        serde_json::json!({"precision": "exact", "value": 1})
    );
    assert_eq!(
        shards["dead_letters"],
        serde_json::json!({"precision": "exact", "value": 0})
    );
    // State, not sentinel dates: paused, with no next attempt, listed apart.
    assert_eq!(shards["shards"][0]["state"]["status"], "paused");
    assert_eq!(
        shards["shards"][0]["next_scheduled_for"],
        Value::Null,
        "{shards}"
    );
    assert_eq!(shards["failing"], serde_json::json!([]), "{shards}");
    assert_eq!(shards["paused"][0]["shard"]["identifier"], 1);
    assert_eq!(shards["paused"][0]["state"]["status"], "paused");
    assert_eq!(shards["paused"][0]["state"]["next_attempt"], Value::Null);
    assert!(
        !shards.to_string().contains("9998-"),
        "no sentinel date: {shards}"
    );
    let (_, health) = call(&router, Method::GET, "/health", Some(TOKEN), None).await;
    assert_eq!(health["backlogs"][0]["paused_shards"], 1);
    assert_eq!(health["controls"], 1);
    assert_eq!(
        health["backlogs"][0]["dead_tuples"].is_u64(),
        backend == DbBackend::Postgres,
        "PostgreSQL tells its dead tuples: {health}"
    );

    let lift = r#"{"target":{"kind":"region","scope":0,"identifier":1}}"#;
    let (status, _) = call(
        &router,
        Method::DELETE,
        "/controls",
        Some(TOKEN),
        Some((json, lift)),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // The other process read the controls less than a second ago: it
    // still sees the pause (and parks the shard again); its next read, a
    // second later, sees it gone and releases the shard.
    assert_eq!(
        elsewhere
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .deliveries,
        0
    );
    clock.advance(std::time::Duration::from_secs(1));
    assert_eq!(
        elsewhere
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .deliveries,
        1
    );
    let mut objects: Vec<i64> = recorder.deliveries().iter().map(|d| d.object).collect();
    objects.sort_unstable();
    assert_eq!(objects, vec![1, 2]);
}

/// Dead letters through the API: listed with payload and error, one
/// replayed (and then delivered), one discarded (and gone for good).
async fn dead_letters_are_listed_replayed_and_discarded(backend: DbBackend) {
    let Setup {
        db,
        recorder,
        drainer,
        router,
    } = setup_with(backend, "admin_dead_letters", &[1, 2], |drainer| {
        drainer.dead_letter(OutboxScope::OrganizationScope, 1)
    })
    .await;
    recorder.fail_when(|_| true);
    assert_eq!(
        drainer
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .dead_lettered,
        2
    );
    let (status, dead) = call(&router, Method::GET, "/dead-letters", Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::OK);
    let dead = dead.as_array().unwrap().clone();
    assert_eq!(dead.len(), 2, "{dead:?}");
    let id_of = |organization: i64| {
        dead.iter()
            .find(|d| d["object_identifier"] == organization)
            .map(|d| {
                assert_eq!(d["payload"], json!({ "v": organization }));
                assert!(!d["error"].as_str().unwrap().is_empty());
                // The message id it was written with (a v7 UUID), what its
                // receiver records.
                let message_id: outbox_core::uuid::Uuid =
                    d["message_id"].as_str().unwrap().parse().unwrap();
                assert_eq!(message_id.get_version_num(), 7);
                d["id"].as_i64().unwrap()
            })
            .unwrap()
    };
    let (keep, drop) = (id_of(1), id_of(2));
    let json = "application/json";
    let body = |id: i64| json!({ "kind": "region", "ids": [id] }).to_string();
    let (status, replayed) = call(
        &router,
        Method::POST,
        "/dead-letters/replay",
        Some(TOKEN),
        Some((json, &body(keep))),
    )
    .await;
    assert_eq!(
        (status, replayed["replayed"].as_u64()),
        (StatusCode::OK, Some(1))
    );
    let (status, discarded) = call(
        &router,
        Method::POST,
        "/dead-letters/discard",
        Some(TOKEN),
        Some((json, &body(drop))),
    )
    .await;
    assert_eq!(
        (status, discarded["discarded"].as_u64()),
        (StatusCode::OK, Some(1))
    );
    let (_, dead) = call(&router, Method::GET, "/dead-letters", Some(TOKEN), None).await;
    assert_eq!(dead, json!([]));

    recorder.stop_failing();
    assert_eq!(
        drainer
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .deliveries,
        1
    );
    let delivered: Vec<i64> = recorder.deliveries().iter().map(|d| d.object).collect();
    assert_eq!(delivered, vec![1]);
    assert_eq!(
        db.store().pending_count(OutboxKind::Region).await.unwrap(),
        0
    );
}

outbox_testing::on_both_backends!(
    dead_letters_are_listed_replayed_and_discarded,
    unauthorised_requests_get_401_and_change_nothing,
    bad_input_gets_a_typed_error_and_changes_nothing,
    a_pause_through_the_admin_api_holds_in_another_process,
    a_viewer_reads_and_every_change_is_refused_and_recorded,
    operators_actions_are_recorded_with_who_why_and_how_they_ended,
    wrong_credentials_are_throttled,
    one_clients_failures_never_lock_out_another,
    the_client_address_is_required_or_taken_from_the_trusted_header,
    routes_behind_require_principal_share_the_throttle,
    answers_are_not_cached_or_framed,
    the_history_route_merges_every_workers_samples,
    a_blocked_shards_head_is_shown_and_set_aside,
    the_openapi_document_covers_every_route,
    the_asyncapi_document_is_served,
    scopes_and_categories_are_named_beside_their_numbers,
);
