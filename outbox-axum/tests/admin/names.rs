//! Scopes and categories by number and by name: in shard references,
//! control targets, dead letters and the scopes' backlog; a shard read
//! from one route is accepted back by another, and a `scope_name` that
//! does not name its scope is refused with a typed 400.

use axum::http::{Method, StatusCode};
use outbox_core::store::StoreAdmin;
use outbox_core::OutboxKind;
use serde_json::{json, Value};

use super::{call, setup, DbBackend, TOKEN};

const JSON: &str = "application/json";

pub(super) async fn scopes_and_categories_are_named_beside_their_numbers(backend: DbBackend) {
    let setup = setup(backend, "admin_names", &[1, 2]).await;
    let router = &setup.router;
    setup
        .recorder
        .fail_when(|message| message.object_identifier == 1);
    setup.drainer.drain_due(OutboxKind::Region).await.unwrap();

    // A shard reference carries its scope's number and name.
    let named = json!({
        "kind": "region", "scope": 0, "scope_name": "OrganizationScope", "identifier": 1
    });
    let (status, shards) = call(router, Method::GET, "/shards", Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::OK, "{shards}");
    assert_eq!(shards["shards"][0]["shard"], named, "{shards}");
    assert_eq!(shards["failing"][0]["shard"], named, "{shards}");

    // The scopes' backlog: number and name, as everywhere else.
    let (_, health) = call(router, Method::GET, "/health", Some(TOKEN), None).await;
    let scope = &health["backlogs"][0]["scopes"][0];
    assert_eq!(
        (
            &scope["scope"],
            &scope["scope_name"],
            &scope["depth"]["value"]
        ),
        (&json!(0), &json!("OrganizationScope"), &json!(1)),
        "{health}"
    );

    // A `scope_name` that is not its scope's name: 400, nothing changed.
    let wrong = json!({
        "kind": "region", "scope": 0, "scope_name": "AuditLogScope", "identifier": 1
    });
    let undeclared = json!({
        "kind": "region", "scope": 9, "scope_name": "OrganizationScope", "identifier": 1
    });
    for shard in [&wrong, &undeclared] {
        let requests = [
            (Method::POST, "/shards/retry", json!({ "shards": [shard] })),
            (
                Method::PUT,
                "/controls",
                json!({ "target": shard, "action": "pause" }),
            ),
            (Method::POST, "/shards/set-aside", json!({ "shard": shard })),
        ];
        for (method, uri, body) in requests {
            let body = body.to_string();
            let (status, error) = call(
                router,
                method.clone(),
                uri,
                Some(TOKEN),
                Some((JSON, &body)),
            )
            .await;
            assert_eq!(
                (status, &error["error"]["code"]),
                (StatusCode::BAD_REQUEST, &Value::from("bad_request")),
                "{method} {uri} {body}: {error}"
            );
            assert!(
                error["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("scope_name"),
                "{error}"
            );
        }
    }
    let uri = "/shards/head?kind=region&scope=0&identifier=1&scope_name=AuditLogScope";
    let (status, _) = call(router, Method::GET, uri, Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(setup.db.store().controls().await.unwrap().is_empty());
    assert!(setup
        .db
        .store()
        .dead_letters(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());

    // What was read is accepted back as it is: the shard of `/shards` to
    // `/shards/retry`, a control's target to `DELETE /controls`.
    let retry = json!({ "shards": [shards["failing"][0]["shard"]] }).to_string();
    let (status, retried) = call(
        router,
        Method::POST,
        "/shards/retry",
        Some(TOKEN),
        Some((JSON, &retry)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    assert_eq!(retried["released"], json!([named]), "{retried}");

    let pause = json!({ "target": named, "action": "pause" }).to_string();
    let (status, control) = call(
        router,
        Method::PUT,
        "/controls",
        Some(TOKEN),
        Some((JSON, &pause)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{control}");
    assert_eq!(control["target"], named, "{control}");
    let (_, controls) = call(router, Method::GET, "/controls", Some(TOKEN), None).await;
    let lift = json!({ "target": controls[0]["target"] }).to_string();
    let (status, _) = call(
        router,
        Method::DELETE,
        "/controls",
        Some(TOKEN),
        Some((JSON, &lift)),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    // The audit log names the scope by name and number too.
    let (_, audit) = call(router, Method::GET, "/audit?limit=1", Some(TOKEN), None).await;
    assert_eq!(
        audit[0]["target"], "region-outbox shard OrganizationScope (0) 1",
        "{audit}"
    );

    // A dead letter: its category's number and name.
    let set_aside = json!({ "shard": named }).to_string();
    let (status, done) = call(
        router,
        Method::POST,
        "/shards/set-aside",
        Some(TOKEN),
        Some((JSON, &set_aside)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["shard"], named, "{done}");
    let (_, dead) = call(router, Method::GET, "/dead-letters", Some(TOKEN), None).await;
    assert_eq!(dead[0]["shard"], named, "{dead}");
    assert_eq!(
        (&dead[0]["category"], &dead[0]["category_name"]),
        (&json!(1), &json!("OrganizationUpdate")),
        "{dead}"
    );
}
