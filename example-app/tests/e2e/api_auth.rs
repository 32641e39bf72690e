//! The public API's authentication: missing, wrong, forged and expired
//! credentials on every route get 401 and write nothing; a user's token
//! from Control works on every silo, but not on the admin-only routes.

use example_app::api_auth::ApiTokens;
use reqwest::Method;

use super::*;
use deployment::{keys, rpc_key, API_TOKEN_KEY};

/// Every public route: (silo, method, path, body).
fn routes(user: i64, org: i64, member: i64) -> Vec<(&'static str, Method, String, Option<Value>)> {
    let org_body = Some(json!({ "slug": "intruder", "name": "Intruder" }));
    vec![
        (
            "control",
            Method::GET,
            "/api/0/organization-mappings?slug=acme".into(),
            None,
        ),
        (
            "control",
            Method::GET,
            format!("/api/0/organization-mappings/{org}"),
            None,
        ),
        (
            "control",
            Method::POST,
            "/api/0/users".into(),
            Some(json!({ "email": "eve@example.com", "name": "Eve" })),
        ),
        ("control", Method::GET, format!("/api/0/users/{user}"), None),
        (
            "control",
            Method::PUT,
            format!("/api/0/users/{user}"),
            Some(json!({ "name": "Eve" })),
        ),
        (
            "control",
            Method::DELETE,
            format!("/api/0/users/{user}"),
            None,
        ),
        (
            "control",
            Method::POST,
            format!("/api/0/users/{user}/tokens"),
            None,
        ),
        (
            "control",
            Method::GET,
            format!("/api/0/audit-logs?organization_id={org}"),
            None,
        ),
        (
            "us",
            Method::POST,
            "/api/0/organizations".into(),
            org_body.clone(),
        ),
        (
            "us",
            Method::POST,
            "/api/0/organizations/bulk".into(),
            Some(json!([{ "slug": "bulk-intruder", "name": "B" }])),
        ),
        (
            "us",
            Method::GET,
            format!("/api/0/organizations/{org}"),
            None,
        ),
        (
            "us",
            Method::PUT,
            format!("/api/0/organizations/{org}"),
            Some(json!({ "name": "Taken over" })),
        ),
        (
            "us",
            Method::DELETE,
            format!("/api/0/organizations/{org}"),
            None,
        ),
        (
            "us",
            Method::POST,
            format!("/api/0/organizations/{org}/members"),
            Some(json!({ "user_id": user, "role": "owner" })),
        ),
        (
            "us",
            Method::DELETE,
            format!("/api/0/organizations/{org}/members/{member}"),
            None,
        ),
        ("us", Method::GET, format!("/api/0/users/{user}"), None),
    ]
}

/// The rows the public API writes, on every silo, and the outbox rows.
async fn rows(app: &Deployment) -> Vec<i64> {
    let mut counts = Vec::new();
    let silos = [
        (
            &app.control.as_ref().unwrap().db,
            ["users", "control_outbox", "region_outbox"],
        ),
        (
            &app.regions["us"].db,
            ["organization", "organization_member", "region_outbox"],
        ),
    ];
    for (db, tables) in silos {
        for table in tables {
            let row = db
                .query_one_raw(sea_orm::Statement::from_string(
                    db.get_database_backend(),
                    format!("SELECT count(*) AS n FROM {table}"),
                ))
                .await
                .unwrap()
                .unwrap();
            counts.push(row.try_get::<i64>("", "n").unwrap());
        }
    }
    counts
}

async fn answer(
    app: &Deployment,
    silo: &str,
    method: Method,
    path: &str,
    body: &Option<Value>,
    authorization: Option<&str>,
) -> (StatusCode, Value, reqwest::header::HeaderMap) {
    let base = if silo == "control" {
        app.control_base()
    } else {
        app.region_base(silo)
    };
    let mut request = app.http.request(method, format!("{base}{path}"));
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        headers,
    )
}

async fn every_route_refuses_bad_credentials_and_writes_nothing(backend: DbBackend) {
    let app = Deployment::start(backend).await;
    // With the admin token: a user, an organization, a membership.
    let (_, user, _) = app
        .send(
            Method::POST,
            app.control_url("/api/0/users"),
            Some(json!({ "email": "ann@example.com", "name": "Ann" })),
        )
        .await;
    let user = user["id"].as_i64().unwrap();
    let org = app.create_org("us", "acme", "Acme").await;
    let (status, member, _) = app
        .send(
            Method::POST,
            app.region_url("us", &format!("/api/0/organizations/{org}/members")),
            Some(json!({ "user_id": user, "role": "owner" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let member = member["id"].as_i64().unwrap();
    app.eventually("the user reaches us", || async {
        app.get(app.region_url("us", &format!("/api/0/users/{user}")))
            .await
            .0
            == StatusCode::OK
    })
    .await;
    for region in ["us", "de"] {
        app.eventually("the outboxes empty", || async {
            app.get(app.region_url(region, "/admin/outbox/shards"))
                .await
                .1["pending"]["value"]
                == 0
        })
        .await;
    }
    app.eventually("Control's outbox empties", || async {
        app.get(app.control_url("/admin/outbox/shards")).await.1["pending"]["value"] == 0
    })
    .await;
    // The admin view's pending count can read 0 while a row is still in
    // a table (CI, SQLite: a control_outbox row counted here, drained
    // during the requests below); wait for the tables themselves.
    app.eventually("every outbox table is empty", || async {
        let counts = rows(&app).await;
        [counts[1], counts[2], counts[5]] == [0, 0, 0]
    })
    .await;
    let before = rows(&app).await;

    let now = chrono::Utc::now().timestamp();
    let tokens = ApiTokens::new(keys(API_TOKEN_KEY));
    let expired = format!("Bearer {}", tokens.issue(user, now - 60));
    let forged = format!(
        "Bearer {}",
        ApiTokens::new(keys(&rpc_key("other"))).issue(user, now + 3600)
    );
    let tampered = {
        let token = tokens.issue(user, now + 3600);
        let (_, rest) = token.split_once('.').unwrap();
        format!("Bearer {}.{rest}", user + 1)
    };
    let credentials: [(&str, Option<&str>); 6] = [
        ("missing", None),
        ("wrong", Some("Bearer not-a-token")),
        ("not bearer", Some("Basic YWRtaW46YWRtaW4=")),
        ("another key's", Some(&forged)),
        ("another user's signature", Some(&tampered)),
        ("expired", Some(&expired)),
    ];
    for (silo, method, path, body) in routes(user, org, member) {
        for (what, authorization) in &credentials {
            let (status, error, headers) =
                answer(&app, silo, method.clone(), &path, &body, *authorization).await;
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{what} credentials on {method} {path}: {error}"
            );
            assert!(error["error"].is_string(), "{error}");
            assert_eq!(headers["www-authenticate"], "Bearer");
        }
    }
    assert_eq!(rows(&app).await, before, "nothing written");

    // A token from Control opens the API on every silo, but not the
    // routes that need the admin token.
    let (status, issued, _) = app
        .send(
            Method::POST,
            app.control_url(&format!("/api/0/users/{user}/tokens?ttl_seconds=600")),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    let token = format!("Bearer {}", issued["token"].as_str().unwrap());
    for (silo, path) in [
        ("control", format!("/api/0/users/{user}")),
        ("us", format!("/api/0/users/{user}")),
    ] {
        let (status, body, _) = answer(&app, silo, Method::GET, &path, &None, Some(&token)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, _, _) = answer(
        &app,
        "us",
        Method::POST,
        "/api/0/organizations",
        &Some(json!({ "slug": "by-ann", "name": "By Ann" })),
        Some(&token),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    for path in [
        "/api/0/users".to_owned(),
        format!("/api/0/users/{user}/tokens"),
    ] {
        let (status, _, _) = answer(
            &app,
            "control",
            Method::POST,
            &path,
            &Some(json!({ "email": "x@example.com", "name": "X" })),
            Some(&token),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
    }
    // The RPC routes keep their own authentication, health and metrics none.
    let (status, _, _) = answer(&app, "us", Method::GET, "/healthz", &None, None).await;
    assert_eq!(status, StatusCode::OK);
    app.shutdown().await;
}

mod sqlite {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn every_route_refuses_bad_credentials_and_writes_nothing() {
        super::every_route_refuses_bad_credentials_and_writes_nothing(DbBackend::Sqlite).await;
    }
}

mod postgres {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn every_route_refuses_bad_credentials_and_writes_nothing() {
        super::every_route_refuses_bad_credentials_and_writes_nothing(DbBackend::Postgres).await;
    }
}
