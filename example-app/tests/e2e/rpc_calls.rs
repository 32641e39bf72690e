//! The silos' RPC as they call it: refused unsigned, applied once per
//! message id, and never after a newer fencing token.

use super::*;

pub(super) async fn unsigned_rpc_is_refused_and_changes_nothing(backend: DbBackend) {
    let app = Deployment::start(backend).await;
    let (status, body, _) = app
        .send(
            reqwest::Method::PUT,
            app.control_url("/rpc/organization-mappings/77"),
            Some(json!({ "slug": "x", "name": "x", "region": "us" })),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body["error"].as_str().unwrap().contains("signed"), "{body}");
    let (status, _) = app
        .get(app.control_url("/api/0/organization-mappings/77"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = app
        .send(
            reqwest::Method::PUT,
            app.region_url("us", "/rpc/users/5"),
            Some(json!({ "email": "e", "name": "n" })),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    app.shutdown().await;
}

/// The RPCs of receivers carry their message id, which the silo that
/// applies them records in its inbox in the same transaction: a call
/// redelivered with an id already applied is answered with success and
/// applies nothing; a malformed id is refused.
pub(super) async fn rpcs_carry_their_message_id_and_a_redelivery_applies_nothing(
    backend: DbBackend,
) {
    let app = Deployment::start(backend).await;
    app.create_org("us", "inboxed", "I0").await;
    // Delivered to Control at response time: the mapping and the audit event.
    let control = app.control.as_ref().unwrap();
    let count = |sql: &'static str| async move {
        control
            .db
            .query_one_raw(sea_orm::Statement::from_string(
                control.db.get_database_backend(),
                sql,
            ))
            .await
            .unwrap()
            .unwrap()
            .try_get::<i64>("", "n")
            .unwrap()
    };
    let recorded = count("SELECT count(*) AS n FROM outbox_inbox WHERE consumer = 'rpc:us'").await;
    assert_eq!(recorded, 2, "one inbox row per message applied");

    let message_id = deployment::message_id();
    let us_keys = deployment::keys(&deployment::rpc_key("us"));
    let audit_body = |sequence: i64| {
        Some(json!({
            "region": "us",
            "region_sequence": sequence,
            "organization_id": 4242,
            "action": "organization.update",
            "detail": format!("call {sequence}"),
            "occurred_at": "2026-11-23T00:00:00Z",
        }))
    };
    let audit_call = |sequence: i64, delivery: Vec<(&'static str, String)>| {
        app.rpc(
            &us_keys,
            example_app::rpc::now(),
            &delivery,
            reqwest::Method::POST,
            &app.control_base(),
            "/rpc/audit-logs",
            audit_body(sequence),
        )
    };
    let audit = |sequence: i64, message_id: String| {
        audit_call(sequence, deployment::delivery("us", &message_id)).send()
    };
    // The second call carries the same message id (a redelivery): applied
    // once, even though its body would insert a row of its own.
    for sequence in [900_001, 900_002] {
        let response = audit(sequence, message_id.clone()).await.unwrap();
        let status = response.status();
        assert_eq!(
            status,
            StatusCode::NO_CONTENT,
            "{}",
            response.text().await.unwrap()
        );
    }
    let response = audit(900_003, "not-a-uuid".to_owned()).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);

    // Rule 12: the deliveries carried their fencing token, recorded per
    // sender and shard; a call with a lower token than one applied for its
    // shard (a worker paused past its lease) is answered with success and
    // applies nothing, though its message id is new.
    let fences = count(
        "SELECT count(*) AS n FROM outbox_inbox_fence WHERE consumer = 'rpc:us' AND sender = 'us'",
    )
    .await;
    assert!(fences >= 1, "the region's deliveries carried their tokens");
    let fenced = |sequence: i64, token: &str, shard: Option<&str>| {
        use example_app::rpc::{CATEGORY_HEADER, FENCE_HEADER};
        let mut delivery = deployment::delivery("us", &deployment::message_id());
        delivery.push((FENCE_HEADER, token.to_owned()));
        delivery.push((CATEGORY_HEADER, "AuditLogEvent".to_owned()));
        if let Some(shard) = shard {
            delivery.push((example_app::rpc::SHARD_HEADER, shard.to_owned()));
        }
        audit_call(sequence, delivery).send()
    };
    let shard = Some("region:2/4242");
    for (sequence, token) in [(900_004, "1000000000000"), (900_005, "5")] {
        let response = fenced(sequence, token, shard).await.unwrap();
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
    }
    let response = fenced(900_006, "1000000000001", None).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::BAD_REQUEST,
        "a token needs its shard"
    );

    let (status, events) = app
        .get(app.control_url("/api/0/audit-logs?organization_id=4242"))
        .await;
    assert_eq!(status, StatusCode::OK);
    let mut details: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["detail"].as_str().unwrap())
        .collect();
    details.sort_unstable();
    assert_eq!(
        details,
        ["call 900001", "call 900004"],
        "call 900005 was superseded"
    );
    app.shutdown().await;
}
