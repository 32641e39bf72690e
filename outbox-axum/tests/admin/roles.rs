//! Roles and the audit log: a viewer reads everything and every change it
//! asks for is refused (403) and recorded; an operator's changes are
//! recorded with who, what, on what, why and how they ended.

use axum::http::{Method, StatusCode};
use outbox_core::store::StoreAdmin;
use outbox_core::OutboxKind;
use serde_json::Value;

use super::{
    call, every_route, nothing_changed, pause_body, setup, DbBackend, Setup, TOKEN, VIEWER_TOKEN,
};

async fn audit_log(setup: &Setup) -> Vec<Value> {
    let (status, log) = call(&setup.router, Method::GET, "/audit", Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::OK, "{log}");
    log.as_array().unwrap().clone()
}

pub(super) async fn a_viewer_reads_and_every_change_is_refused_and_recorded(backend: DbBackend) {
    let setup = setup(backend, "admin_viewer", &[1]).await;
    let pause = pause_body(1);
    let mut refused = Vec::new();
    for (method, uri, body) in every_route(&pause) {
        let (status, answer) =
            call(&setup.router, method.clone(), uri, Some(VIEWER_TOKEN), body).await;
        if method == Method::GET {
            assert_eq!(status, StatusCode::OK, "{method} {uri}: {answer}");
        } else {
            assert_eq!(status, StatusCode::FORBIDDEN, "{method} {uri}: {answer}");
            assert_eq!(answer["error"]["code"], "forbidden", "{answer}");
            refused.push(format!("{method} {uri}"));
        }
    }
    assert_eq!(refused.len(), 6, "every change was tried");
    nothing_changed(&setup.db).await;

    let log = audit_log(&setup).await;
    assert_eq!(log.len(), refused.len(), "{log:#?}");
    // Newest first: the routes in reverse order.
    for (record, route) in log.iter().zip(refused.iter().rev()) {
        assert_eq!(record["actor"], "on-call");
        assert_eq!(record["role"], "viewer");
        assert_eq!(record["action"], "refused");
        assert_eq!(record["target"], route.as_str());
        assert_eq!(record["outcome"], "forbidden");
    }
}

pub(super) async fn operators_actions_are_recorded_with_who_why_and_how_they_ended(
    backend: DbBackend,
) {
    let setup = setup(backend, "admin_audit", &[1]).await;
    let json = "application/json";
    let pause = pause_body(1);
    let (status, _) = call(
        &setup.router,
        Method::PUT,
        "/controls",
        Some(TOKEN),
        Some((json, &pause)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let lift = r#"{"target":{"kind":"region","scope":0,"identifier":1}}"#;
    let (status, _) = call(
        &setup.router,
        Method::DELETE,
        "/controls",
        Some(TOKEN),
        Some((json, lift)),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // Refused for bad input: recorded with its error code.
    let retry = r#"{"shards":[{"kind":"region","scope":0,"identifier":1}]}"#;
    let (status, _) = call(
        &setup.router,
        Method::POST,
        "/shards/retry",
        Some(TOKEN),
        Some((json, retry)),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(
        &setup.router,
        Method::POST,
        "/dead-letters/discard",
        Some(TOKEN),
        Some((json, r#"{"kind":"region","ids":[41, 42]}"#)),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let log = audit_log(&setup).await;
    let summary: Vec<(&str, &str, &str, &str)> = log
        .iter()
        .map(|record| {
            (
                record["actor"].as_str().unwrap(),
                record["action"].as_str().unwrap(),
                record["target"].as_str().unwrap(),
                record["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "admin",
                "discard",
                "region dead letters 41, 42",
                "unknown_dead_letters"
            ),
            (
                "admin",
                "retry",
                "region-outbox shard OrganizationScope (0) 1",
                "unknown_shard"
            ),
            (
                "admin",
                "resume",
                "region-outbox shard OrganizationScope (0) 1",
                "ok"
            ),
            (
                "admin",
                "pause",
                "region-outbox shard OrganizationScope (0) 1",
                "ok"
            ),
        ]
    );
    assert_eq!(log[3]["reason"], "investigating");
    assert_eq!(log[3]["role"], "operator");
    assert!(log[0]["id"].as_i64() > log[1]["id"].as_i64());
    let (status, error) = call(
        &setup.router,
        Method::GET,
        "/audit?limit=0",
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (StatusCode::BAD_REQUEST, &Value::from("bad_request"))
    );
    let (_, one) = call(
        &setup.router,
        Method::GET,
        "/audit?limit=1",
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(one.as_array().unwrap().len(), 1);
    assert_eq!(
        setup
            .db
            .store()
            .pending_count(OutboxKind::Region)
            .await
            .unwrap(),
        1,
        "nothing was delivered or lost"
    );
}
