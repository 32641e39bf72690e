//! Bad input over HTTP: stalled, oversized and mistyped bodies, hostile
//! text and random JSON on every write route: typed 4xx answers, never a
//! 5xx, nothing written.

use super::*;

/// A body that stalls half-way holds no connection and ends with 408 at the
/// body timeout; an oversized body gets 413, a body that is not JSON 415.
pub(super) async fn stalled_oversized_and_mistyped_bodies_get_408_413_415(backend: DbBackend) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = Deployment::start(backend).await;
    let mut stalled = tokio::net::TcpStream::connect(app.regions["us"].addr)
        .await
        .unwrap();
    stalled
        .write_all(
            format!(
                "POST /api/0/organizations HTTP/1.1\r\nhost: us\r\n\
                 authorization: Bearer {SECRET}\r\ncontent-type: application/json\r\n\
                 content-length: 100\r\n\r\n{{\"slug\": \"sta"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // Meanwhile the silo serves others, replication included.
    let id = app.create_org("us", "others", "Others").await;
    let (status, _) = app
        .get(app.control_url(&format!("/api/0/organization-mappings/{id}")))
        .await;
    assert_eq!(status, StatusCode::OK);
    // The stalled request ends at its body timeout (2 s here).
    let mut head = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(30), stalled.read_exact(&mut head))
        .await
        .expect("the stalled request got no answer")
        .unwrap();
    assert_eq!(&head, b"HTTP/1.1 408");

    let oversized = json!({ "slug": "big", "name": "x".repeat(3 << 20) });
    let (status, body, _) = app
        .send(
            reqwest::Method::POST,
            app.region_url("us", "/api/0/organizations"),
            Some(oversized),
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    // The server answered before reading that body and closed the
    // connection: a fresh client, not a pooled connection.
    let response = fresh_client()
        .post(app.region_url("us", "/api/0/organizations"))
        .bearer_auth(SECRET)
        .header("content-type", "text/plain")
        .body(r#"{"slug": "plain", "name": "Plain"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let organizations = app.regions["us"]
        .db
        .query_one_raw(sea_orm::Statement::from_string(
            app.regions["us"].db.get_database_backend(),
            "SELECT count(*) AS n FROM organization",
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get::<i64>("", "n")
        .unwrap();
    assert_eq!(organizations, 1, "only the well-formed request wrote");
    app.shutdown().await;
}

/// Text that PostgreSQL or an index would refuse (NUL, thousands of
/// characters) is a 400 at the edge on every route, never a 500; a member
/// mapping for a region nobody knows is refused before any outbox row
/// exists; and the silos go on serving.
pub(super) async fn hostile_text_gets_400_and_writes_nothing(backend: DbBackend) {
    let app = Deployment::start(backend).await;
    let long = "x".repeat(6_000);
    let cases = [
        (
            app.region_url("us", "/api/0/organizations"),
            json!({ "slug": "nul\0", "name": "N" }),
        ),
        (
            app.region_url("us", "/api/0/organizations"),
            json!({ "slug": "ok", "name": "a\0b" }),
        ),
        (
            app.region_url("us", "/api/0/organizations"),
            json!({ "slug": long, "name": "N" }),
        ),
        (
            app.region_url("us", "/api/0/organizations/bulk"),
            json!([{ "slug": "ok", "name": long }]),
        ),
        (
            app.control_url("/api/0/users"),
            json!({ "email": "a\0@b", "name": "A" }),
        ),
        (
            app.control_url("/api/0/users"),
            json!({ "email": long, "name": "A" }),
        ),
    ];
    for (url, body) in cases {
        let (status, answer, _) = app
            .send(reqwest::Method::POST, url.clone(), Some(body))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}: {answer}");
        assert!(answer["error"].is_string(), "{answer}");
    }
    // Signed with a region's key: RPC bodies are checked too.
    let us_keys = deployment::keys(&deployment::rpc_key("us"));
    let rpc = |method: reqwest::Method, path: &str, body: Value| {
        app.rpc(
            &us_keys,
            example_app::rpc::now(),
            &deployment::delivery("us", &deployment::message_id()),
            method,
            &app.control_base(),
            path,
            Some(body),
        )
        .send()
    };
    let response = rpc(
        reqwest::Method::PUT,
        "/rpc/organization-mappings/7",
        json!({ "slug": "s\0", "name": "N", "region": "us" }),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let user = app
        .send(
            reqwest::Method::POST,
            app.control_url("/api/0/users"),
            Some(json!({ "email": "ann@example.com", "name": "Ann" })),
        )
        .await
        .1["id"]
        .as_i64()
        .unwrap();
    let response = rpc(
        reqwest::Method::PUT,
        "/rpc/member-mappings/mars/1",
        json!({ "organization_id": 65, "user_id": user, "role": "owner" }),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let control = app.control.as_ref().unwrap();
    let pending = control
        .drainer
        .view()
        .pending_count(outbox_core::OutboxKind::Control)
        .await
        .unwrap();
    assert_eq!(pending, 0, "no outbox row for mars");
    // Nothing was written, and everything still works.
    let id = app.create_org("us", "still-fine", "Still fine").await;
    let (status, _) = app
        .get(app.control_url(&format!("/api/0/organization-mappings/{id}")))
        .await;
    assert_eq!(status, StatusCode::OK);
    app.shutdown().await;
}

/// A hostile request, as the property test generates it.
#[derive(Debug, Clone)]
struct Hostile {
    route: usize,
    body: Vec<u8>,
    content_type: Option<&'static str>,
    secret: Option<&'static str>,
}

/// (silo, method, path): every write route, public and RPC.
const HOSTILE_ROUTES: &[(&str, &str, &str)] = &[
    ("us", "POST", "/api/0/organizations"),
    ("us", "POST", "/api/0/organizations/bulk"),
    ("us", "PUT", "/api/0/organizations/65"),
    ("us", "POST", "/api/0/organizations/65/members"),
    ("us", "PUT", "/rpc/users/5"),
    ("us", "POST", "/admin/outbox/shards/retry"),
    ("control", "POST", "/api/0/users"),
    ("control", "PUT", "/api/0/users/1"),
    ("control", "PUT", "/rpc/organization-mappings/7"),
    ("control", "PUT", "/rpc/member-mappings/us/3"),
    ("control", "PUT", "/rpc/member-mappings/mars/3"),
    ("control", "POST", "/rpc/audit-logs"),
];

fn hostile_json() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let text = prop_oneof![
        "[a-z]{0,12}".prop_map(|s| s),
        ".{0,40}".prop_map(|s| s),
        Just("nul\0inside".to_owned()),
        (0usize..7_000).prop_map(|n| "é".repeat(n)),
        Just("us".to_owned()),
        Just("mars".to_owned()),
    ];
    let leaf = prop_oneof![
        text.prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        Just(Value::from(i64::MIN)),
        Just(Value::from(u64::MAX)),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        any::<bool>().prop_map(Value::from),
        Just(Value::Null),
    ];
    let value = leaf.prop_recursive(3, 16, 4, |inner| {
        prop::collection::vec(inner, 0..4).prop_map(Value::from)
    });
    let field = prop_oneof![
        Just("slug"),
        Just("name"),
        Just("email"),
        Just("role"),
        Just("region"),
        Just("user_id"),
        Just("organization_id"),
        Just("region_sequence"),
        Just("action"),
        Just("detail"),
        Just("occurred_at"),
        Just("kind"),
        Just("scope"),
        Just("shard_identifier"),
        Just("unknown_field"),
    ];
    let object = prop::collection::btree_map(field, value.clone(), 0..8).prop_map(|fields| {
        Value::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    });
    prop_oneof![
        object.clone(),
        prop::collection::vec(object, 0..3).prop_map(Value::from),
        value
    ]
}

fn hostile() -> impl proptest::strategy::Strategy<Value = Hostile> {
    use proptest::prelude::*;
    let body = prop_oneof![
        3 => hostile_json().prop_map(|value| serde_json::to_vec(&value).unwrap()),
        1 => prop::collection::vec(any::<u8>(), 0..300),
        // Well-formed now and then, so that some cases pass every check.
        1 => "[a-z]{10}".prop_map(|slug| {
            serde_json::to_vec(&json!({ "slug": slug, "name": slug, "email": slug, "role": "owner" }))
                .unwrap()
        }),
    ];
    (
        0..HOSTILE_ROUTES.len(),
        body,
        prop_oneof![
            Just(Some("application/json")),
            Just(Some("application/json; charset=utf-8")),
            Just(Some("text/plain")),
            Just(None),
        ],
        // The right credentials most often: the cases must get past them.
        prop_oneof![
            3 => Just(Some(SECRET)),
            1 => Just(Some("wrong")),
            1 => Just(None),
        ],
    )
        .prop_map(|(route, body, content_type, secret)| Hostile {
            route,
            body,
            content_type,
            secret,
        })
}

/// Property: whatever the body, content type and secret, every write route
/// answers 2xx or a typed 4xx with a JSON error, never 5xx; the silos keep
/// serving, and what was written before stays (and replicates).
pub(super) async fn hostile_requests_never_get_a_5xx_and_lose_nothing(backend: DbBackend) {
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::TestRunner;
    let app = Deployment::start(backend).await;
    let before = app.create_org("us", "before", "Before").await;
    let mut runner = TestRunner::deterministic();
    let client = fresh_client();
    let mut statuses = std::collections::BTreeMap::new();
    for case in 0..150 {
        let hostile = hostile().new_tree(&mut runner).unwrap().current();
        let (silo, method, path) = HOSTILE_ROUTES[hostile.route];
        let url = if silo == "control" {
            app.control_url(path)
        } else {
            app.region_url(silo, path)
        };
        // No pooled connections: a request refused before its body was
        // read may leave its connection closed by the server.
        let mut request = client
            .request(method.parse().unwrap(), url)
            .body(hostile.body.clone());
        if let Some(content_type) = hostile.content_type {
            request = request.header("content-type", content_type);
        }
        if path.starts_with("/rpc/") {
            // Signed as the silo that calls this one (with a wrong key for
            // `wrong`): the hostile body, as JSON when it is, travels in
            // the signed envelope.
            if let Some(secret) = hostile.secret {
                let sender = if silo == "control" { "us" } else { "control" };
                let key = if secret == SECRET {
                    deployment::rpc_key(sender)
                } else {
                    deployment::rpc_key("other")
                };
                let body = serde_json::from_slice(&hostile.body).unwrap_or_else(|_| {
                    Value::from(String::from_utf8_lossy(&hostile.body).into_owned())
                });
                let base = if silo == "control" {
                    app.control_base()
                } else {
                    app.region_base(silo)
                };
                request = app.rpc(
                    &deployment::keys(&key),
                    example_app::rpc::now(),
                    &deployment::delivery(sender, &deployment::message_id()),
                    method.parse().unwrap(),
                    &base,
                    path,
                    Some(body),
                );
                if let Some(content_type) = hostile.content_type {
                    request = request.header("content-type", content_type);
                }
            }
        } else if let Some(secret) = hostile.secret {
            request = request.bearer_auth(secret);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        *statuses.entry(status.as_u16()).or_insert(0) += 1;
        assert!(
            !status.is_server_error(),
            "case {case}: {method} {path} answered {status} {text} to {hostile:?} ({})",
            String::from_utf8_lossy(&hostile.body)
        );
        if status.is_client_error() {
            // The example's `{"error": "..."}`, or the admin API's
            // `{"error": {"code": "...", "message": "..."}}`.
            let error: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            assert!(
                error["error"].is_string() || error["error"]["code"].is_string(),
                "case {case}: {status} {text}"
            );
        }
    }
    // The cases reach past the first checks: refusals of several kinds,
    // and some requests that pass.
    for expected in [400, 401, 415] {
        assert!(statuses.contains_key(&expected), "{statuses:?}");
    }
    assert!(
        statuses.keys().any(|s| (200..300).contains(s)),
        "{statuses:?}"
    );
    // Still serving, nothing lost.
    let after = app.create_org("us", "after", "After").await;
    for id in [before, after] {
        let (status, _) = app
            .get(app.control_url(&format!("/api/0/organization-mappings/{id}")))
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    app.shutdown().await;
}

pub(super) async fn bad_requests_get_json_errors(backend: DbBackend) {
    let app = Deployment::start(backend).await;
    app.create_org("us", "taken", "T").await;
    let (status, body, _) = app
        .send(
            reqwest::Method::POST,
            app.region_url("us", "/api/0/organizations"),
            Some(json!({ "slug": "taken", "name": "again" })),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(body["error"].is_string());
    let (status, body, _) = app
        .send(
            reqwest::Method::POST,
            app.region_url("us", "/api/0/organizations"),
            Some(json!({ "name": "no slug" })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"].as_str().unwrap().contains("malformed body"));
    let (status, _) = app
        .get(app.region_url("us", "/api/0/organizations/999"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, health) = app.get(app.region_url("de", "/healthz")).await;
    assert_eq!(
        (status, health["status"].as_str()),
        (StatusCode::OK, Some("ok"))
    );
    app.shutdown().await;
}
