//! `GET /shards/head` and `POST /shards/set-aside`: a quarantined shard's
//! head message shown, moved to the dead letters, the rest delivered.

use axum::http::{Method, StatusCode};
use outbox_core::store::StoreAdmin;
use outbox_core::OutboxKind;
use serde_json::Value;

use super::{call, setup, write, DbBackend, TOKEN};

pub(super) async fn a_blocked_shards_head_is_shown_and_set_aside(backend: DbBackend) {
    let setup = setup(backend, "admin_head", &[1, 2]).await;
    write(&setup.db, 1).await;
    setup
        .recorder
        .fail_permanently_when(|message| message.object_identifier == 1);
    setup.drainer.drain_due(OutboxKind::Region).await.unwrap();
    let rows = setup
        .db
        .store()
        .shard_head(
            &outbox_core::ShardKey::region(super::OutboxScope::OrganizationScope, 1),
            10,
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 2, "two updates of one object: one group");

    let uri = "/shards/head?kind=region&scope=0&identifier=1";
    let (status, head) = call(&setup.router, Method::GET, uri, Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::OK, "{head}");
    assert_eq!(head["id"], rows[0].id);
    assert_eq!(head["category_name"], "OrganizationUpdate");
    assert_eq!(head["object_identifier"], 1);
    assert_eq!(head["group"], serde_json::json!([rows[0].id, rows[1].id]));
    assert_eq!(head["attempts"], 1);
    assert!(
        head["last_error"].as_str().unwrap().contains("refused"),
        "{head}"
    );
    assert!(head["payload_size"].as_u64().unwrap() > 0);

    let json = "application/json";
    let body = r#"{"shard":{"kind":"region","scope":0,"identifier":1},"reason":"bad row"}"#;
    let (status, done) = call(
        &setup.router,
        Method::POST,
        "/shards/set-aside",
        Some(TOKEN),
        Some((json, body)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["ids"], serde_json::json!([rows[0].id, rows[1].id]));
    let dead = setup
        .db
        .store()
        .dead_letters(OutboxKind::Region, 10)
        .await
        .unwrap();
    assert_eq!(dead.len(), 2);
    assert!(
        dead[0].error.contains("set aside by admin: bad row"),
        "{}",
        dead[0].error
    );
    let (_, audit) = call(&setup.router, Method::GET, "/audit", Some(TOKEN), None).await;
    assert_eq!(audit[0]["action"], "set_aside");
    assert_eq!(audit[0]["outcome"], "ok");

    // Nothing left to set aside: 404; bad input: 400; neither recorded as ok.
    let (status, error) = call(
        &setup.router,
        Method::POST,
        "/shards/set-aside",
        Some(TOKEN),
        Some((json, body)),
    )
    .await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (StatusCode::NOT_FOUND, &Value::from("no_pending_rows"))
    );
    let (status, _) = call(&setup.router, Method::GET, uri, Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let nul = r#"{"shard":{"kind":"region","scope":0,"identifier":2},"reason":"a\u0000b"}"#;
    let (status, _) = call(
        &setup.router,
        Method::POST,
        "/shards/set-aside",
        Some(TOKEN),
        Some((json, nul)),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        setup
            .db
            .store()
            .pending_count(OutboxKind::Region)
            .await
            .unwrap(),
        0,
        "organization 2 was delivered by the first round; the set-aside rows are dead letters"
    );
    assert_eq!(
        setup
            .db
            .store()
            .dead_letters(OutboxKind::Region, 10)
            .await
            .unwrap()
            .len(),
        2,
        "the refused request moved nothing"
    );
}
