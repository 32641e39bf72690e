//! Deliveries a fenced receiver refused as superseded (a worker paused past
//! its lease) are counted in the receivers' database and shown to
//! operators: `GET /fences` (JSON, most refusals first) and the dashboard's
//! table, on PostgreSQL and SQLite.

#![allow(missing_docs, clippy::unwrap_used)]

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::{Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use outbox_axum::admin::{Admin, BearerToken};
use outbox_core::{Drainer, FencingToken, ShardKey};
use outbox_seaorm::inbox::{Fence, FenceKey, Inbox};
use outbox_seaorm::SeaOrmStore;
use outbox_testing::database::{DbBackend, TestDatabase};
use sea_orm::TransactionTrait;
use serde_json::json;
use tower::ServiceExt;

outbox_core::registry! {
    OrganizationScope = 0 (shard_field = "organization_id") {
        OrganizationUpdate = 1,
    }
}

const TOKEN: &str = "the fences test's operator token";

/// `GET uri` with `header`: the status and the body.
async fn get(app: &Router, uri: &str, header: (&str, &str)) -> (StatusCode, String) {
    let request = Request::get(uri)
        .header(header.0, header.1)
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

async fn superseded_deliveries_are_shown_to_operators(backend: DbBackend) {
    let db = TestDatabase::of(backend, "admin_fences").await.unwrap();
    let drainer: Drainer<OutboxCategory> = Drainer::new(
        SeaOrmStore::new(db.db.clone()).unwrap(),
        outbox_core::Receivers::new().discard(OutboxCategory::OrganizationUpdate),
    );
    let app = Router::new()
        .nest(
            "/admin/outbox",
            Admin::new(drainer)
                .inbox(db.db.clone())
                .router(BearerToken::new(TOKEN).unwrap()),
        )
        .layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 1))));
    let bearer = format!("Bearer {TOKEN}");
    let fences = |query: &'static str| {
        let (app, bearer) = (app.clone(), bearer.clone());
        async move {
            get(
                &app,
                &format!("/admin/outbox/fences{query}"),
                ("authorization", &bearer),
            )
            .await
        }
    };
    let (status, body) = fences("").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let empty: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(empty, json!({ "superseded": 0, "records": [] }));

    let inbox = Inbox::new("replica");
    let shard = ShardKey::region(OutboxScope::OrganizationScope, 1);
    for (token, expected) in [
        (9, Fence::Current),
        (
            7,
            Fence::Superseded {
                highest: FencingToken::new(9),
            },
        ),
        (
            8,
            Fence::Superseded {
                highest: FencingToken::new(9),
            },
        ),
    ] {
        let key = FenceKey::new(
            "control",
            &shard,
            "OrganizationUpdate",
            FencingToken::new(token),
        );
        let txn = db.db.begin().await.unwrap();
        assert_eq!(inbox.fence(&txn, &key).await.unwrap(), expected);
        txn.commit().await.unwrap();
    }
    let (status, body) = fences("?limit=5").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(listed["superseded"], 2);
    let record = &listed["records"][0];
    assert_eq!(
        (
            &record["consumer"],
            &record["sender"],
            &record["shard"],
            &record["fence"],
            &record["superseded"]
        ),
        (
            &json!("replica"),
            &json!("control"),
            &json!(shard.to_string()),
            &json!(9),
            &json!(2)
        )
    );
    assert!(record["superseded_at"].is_string(), "{record}");
    let (status, body) = fences("?limit=0").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    let login = app
        .clone()
        .oneshot(
            Request::builder()
                .method("POST")
                .uri("/admin/outbox/login")
                .header("content-type", "application/x-www-form-urlencoded")
                .body(Body::from(format!(
                    "token={}",
                    TOKEN.replace(' ', "+").replace('\'', "%27")
                )))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::SEE_OTHER);
    let cookie = login.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let (status, page) = get(&app, "/admin/outbox/dashboard", ("cookie", &cookie)).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("Fenced receivers"), "{page}");
    assert!(
        page.contains("<strong>2</strong> deliveries refused as superseded"),
        "{page}"
    );
}

/// Without `Admin::inbox`, the route says what is missing.
async fn without_the_receivers_database_the_route_says_so(backend: DbBackend) {
    let db = TestDatabase::of(backend, "admin_no_fences").await.unwrap();
    let drainer: Drainer<OutboxCategory> = Drainer::new(
        SeaOrmStore::new(db.db.clone()).unwrap(),
        outbox_core::Receivers::new().discard(OutboxCategory::OrganizationUpdate),
    );
    let app = Admin::new(drainer)
        .router(BearerToken::new(TOKEN).unwrap())
        .layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 1))));
    let bearer = format!("Bearer {TOKEN}");
    let (status, body) = get(&app, "/fences", ("authorization", &bearer)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(
        body.contains("no_inbox") && body.contains("Admin::inbox"),
        "{body}"
    );
}

outbox_testing::on_both_backends!(
    superseded_deliveries_are_shown_to_operators,
    without_the_receivers_database_the_route_says_so,
);
