//! Signed RPC under attack: replays, tampered bodies, stale timestamps,
//! other silos' keys, another region's rows, and key rotation. Each refusal
//! writes nothing.

use reqwest::Method;

use super::*;
use deployment::{delivery, keys, message_id, rpc_key};
use example_app::rpc::now;
use outbox_core::sink::webhook::WebhookKeys;

/// What Control holds that RPCs write: mappings, memberships, audit rows
/// and the inbox's record of applied messages.
pub(super) async fn control_rows(app: &Deployment) -> Vec<i64> {
    let db = &app.control.as_ref().unwrap().db;
    let mut counts = Vec::new();
    for table in [
        "organization_mapping",
        "member_mapping",
        "audit_log",
        "outbox_inbox",
    ] {
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
    counts
}

pub(super) async fn status_of(request: reqwest::RequestBuilder) -> StatusCode {
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    if status.is_client_error() {
        let error: Value = serde_json::from_str(&text).unwrap();
        assert!(error["error"].is_string(), "{status} {text}");
    }
    status
}

/// Waits until the regions' outboxes are empty: nothing more is on its way
/// to Control.
pub(super) async fn settled(app: &Deployment) {
    for region in ["us", "de"] {
        app.eventually("the region outbox empties", || async {
            app.get(app.region_url(region, "/admin/outbox/shards"))
                .await
                .1["pending"]["value"]
                == 0
        })
        .await;
    }
}

pub(super) async fn mapping(app: &Deployment, id: i64) -> Value {
    app.get(app.control_url(&format!("/api/0/organization-mappings/{id}")))
        .await
        .1
}

async fn forged_rpcs_are_refused_and_write_nothing(backend: DbBackend) {
    let app = Deployment::start(backend).await;
    // The silos' own calls are signed and pass.
    let acme = app.create_org("us", "acme", "Acme").await;
    assert_eq!(mapping(&app, acme).await["region"], "us");
    settled(&app).await;
    let before = control_rows(&app).await;

    let (us, de, control) = (
        keys(&rpc_key("us")),
        keys(&rpc_key("de")),
        keys(&rpc_key("control")),
    );
    let control_base = app.control_base();
    let put_mapping = |keys: &WebhookKeys, sender: &str, id: i64, region: &str, at: i64| {
        app.rpc(
            keys,
            at,
            &delivery(sender, &message_id()),
            Method::PUT,
            &control_base,
            &format!("/rpc/organization-mappings/{id}"),
            Some(json!({ "slug": "taken", "name": "Taken", "region": region })),
        )
    };
    let fresh = 64 * 9_000_001 + 1; // a `us` id no organization has

    // A tampered body: the signature no longer matches.
    let signed = put_mapping(&us, "us", fresh, "us", now()).build().unwrap();
    let mut tampered = signed;
    let text = String::from_utf8(tampered.body().unwrap().as_bytes().unwrap().to_vec()).unwrap();
    *tampered.body_mut() = Some(text.replace("Taken", "Taker").into());
    let response = app.http.execute(tampered).await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    // A timestamp outside the 5-minute window, either way.
    for at in [now() - 600, now() + 600] {
        let status = status_of(put_mapping(&us, "us", fresh, "us", at)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "at {at}");
    }

    // Signed with another silo's key than the one it names, or an unknown
    // one; Control's own key is no region's.
    for (keys, sender) in [
        (&de, "us"),
        (&control, "us"),
        (&keys(&rpc_key("other")), "us"),
    ] {
        let status = status_of(put_mapping(keys, sender, fresh, "us", now())).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    // A caller Control does not know, and Control calling itself.
    for (keys, sender) in [(&us, "mars"), (&control, "control")] {
        let status = status_of(put_mapping(keys, sender, fresh, "us", now())).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{sender}");
    }
    // A region calling another region: only Control may.
    let status = status_of(app.rpc(
        &us,
        now(),
        &delivery("us", &message_id()),
        Method::PUT,
        &app.region_base("de"),
        "/rpc/users/5",
        Some(json!({ "email": "e@example.com", "name": "E" })),
    ))
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // No message id (it could not be applied once: 400), or no caller
    // (401): the headers removed from a signed call.
    for (removed, expected) in [
        (example_app::rpc::MESSAGE_ID_HEADER, StatusCode::BAD_REQUEST),
        (example_app::rpc::SENDER_HEADER, StatusCode::UNAUTHORIZED),
    ] {
        let mut request = app
            .rpc(
                &us,
                now(),
                &delivery("us", &message_id()),
                Method::DELETE,
                &control_base,
                &format!("/rpc/organization-mappings/{acme}"),
                None,
            )
            .build()
            .unwrap();
        request.headers_mut().remove(removed);
        let response = app.http.execute(request).await.unwrap();
        assert_eq!(response.status(), expected, "without {removed}");
    }

    // Signed for another route.
    let signed = put_mapping(&us, "us", fresh, "us", now()).build().unwrap();
    let mut moved = signed;
    *moved.url_mut() = format!("{control_base}/rpc/organization-mappings/{acme}")
        .parse()
        .unwrap();
    let response = app.http.execute(moved).await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    // A region writing another region's rows, with its own valid key:
    // a mapping of `us` (new or existing), a `us` membership, a `us` audit
    // row, a `us` mapping deleted.
    let forbidden = [
        put_mapping(&de, "de", fresh, "us", now()),
        put_mapping(&de, "de", acme, "de", now()),
        app.rpc(
            &de,
            now(),
            &delivery("de", &message_id()),
            Method::DELETE,
            &control_base,
            &format!("/rpc/organization-mappings/{acme}"),
            None,
        ),
        app.rpc(
            &de,
            now(),
            &delivery("de", &message_id()),
            Method::PUT,
            &control_base,
            "/rpc/member-mappings/us/65",
            Some(json!({ "organization_id": acme, "user_id": 1, "role": "owner" })),
        ),
        app.rpc(
            &de,
            now(),
            &delivery("de", &message_id()),
            Method::POST,
            &control_base,
            "/rpc/audit-logs",
            Some(json!({
                "region": "us", "region_sequence": 1_000_000_000_i64,
                "organization_id": acme, "action": "organization.update",
                "detail": "forged", "occurred_at": "2026-11-23T00:00:00Z",
            })),
        ),
    ];
    for request in forbidden {
        assert_eq!(status_of(request).await, StatusCode::FORBIDDEN);
    }

    // Control pushes a user only to a region one of whose members names
    // them: a user no member of `us` names is not stored there (204, so
    // that a membership removed meanwhile is not retried for ever).
    let status = status_of(app.rpc(
        &control,
        now(),
        &delivery("control", &message_id()),
        Method::PUT,
        &app.region_base("us"),
        "/rpc/users/424242",
        Some(json!({ "email": "nobody@example.com", "name": "Nobody" })),
    ))
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = app.get(app.region_url("us", "/api/0/users/424242")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Nothing of all that was written.
    assert_eq!(control_rows(&app).await, before);
    assert_eq!(
        mapping(&app, acme).await,
        json!({ "id": acme, "slug": "acme", "name": "Acme", "region": "us" })
    );

    // A replay inside the window is applied once: a captured call, sent
    // again after a newer change, does not put the old state back.
    let first = put_mapping(&us, "us", fresh, "us", now());
    let captured = first.try_clone().unwrap();
    assert_eq!(status_of(first).await, StatusCode::NO_CONTENT);
    let newer = app.rpc(
        &us,
        now(),
        &delivery("us", &message_id()),
        Method::PUT,
        &control_base,
        &format!("/rpc/organization-mappings/{fresh}"),
        Some(json!({ "slug": "taken", "name": "Renamed", "region": "us" })),
    );
    assert_eq!(status_of(newer).await, StatusCode::NO_CONTENT);
    assert_eq!(status_of(captured).await, StatusCode::NO_CONTENT);
    assert_eq!(mapping(&app, fresh).await["name"], "Renamed");
    // A message id is recorded per calling silo: `de`, having seen a call of
    // `us` on the wire, cannot use its id first to have it dropped.
    let squatted = message_id();
    let by_de = app.rpc(
        &de,
        now(),
        &delivery("de", &squatted),
        Method::POST,
        &control_base,
        "/rpc/audit-logs",
        Some(json!({
            "region": "de", "region_sequence": 1_000_000_001_i64,
            "organization_id": 64 * 9_000_003 + 2, "action": "organization.update",
            "detail": "squatting", "occurred_at": "2026-11-23T00:00:00Z",
        })),
    );
    assert_eq!(status_of(by_de).await, StatusCode::NO_CONTENT);
    let squat_target = 64 * 9_000_004 + 1;
    let by_us = app.rpc(
        &us,
        now(),
        &delivery("us", &squatted),
        Method::PUT,
        &control_base,
        &format!("/rpc/organization-mappings/{squat_target}"),
        Some(json!({ "slug": "squatted", "name": "Squatted", "region": "us" })),
    );
    assert_eq!(status_of(by_us).await, StatusCode::NO_CONTENT);
    assert_eq!(mapping(&app, squat_target).await["name"], "Squatted");

    let mut after = before;
    after[0] += 2; // the replayed one's mapping, the squatted id's
    after[2] += 1; // `de`'s audit row of the squatted id
    after[3] += 4; // four messages applied, the replay not recorded again
    assert_eq!(control_rows(&app).await, after);
    app.shutdown().await;
}

/// Key rotation: while Control holds a region's new and old keys, calls
/// signed with either pass; once it holds the new one alone, the old one
/// is refused. The region signs with both meanwhile, so its own calls
/// pass throughout.
async fn a_rotated_key_is_accepted_during_the_rotation_and_refused_after(backend: DbBackend) {
    let old = rpc_key("us");
    let new = rpc_key("us-next");
    let during = format!("{new},{old}");
    let mut app = Deployment::start_with(backend, |config| {
        config.rpc_keys.insert("us".into(), during.clone());
    })
    .await;
    let call = |app: &Deployment, key: &str, name: &str| {
        app.rpc(
            &keys(key),
            now(),
            &delivery("us", &message_id()),
            Method::PUT,
            &app.control_base(),
            &format!("/rpc/organization-mappings/{}", 64 * 9_000_002 + 1),
            Some(json!({ "slug": "rotated", "name": name, "region": "us" })),
        )
    };
    let first = app.create_org("us", "rotating", "During").await;
    assert_eq!(mapping(&app, first).await["region"], "us");
    assert_eq!(
        status_of(call(&app, &old, "old")).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        status_of(call(&app, &new, "new")).await,
        StatusCode::NO_CONTENT
    );

    // The rotation ends: Control keeps the new key only.
    app.stop_control().await;
    app.control_config.rpc_keys.insert("us".into(), new.clone());
    app.start_control().await;
    settled(&app).await;
    let before = control_rows(&app).await;
    assert_eq!(
        status_of(call(&app, &old, "old again")).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(control_rows(&app).await, before);
    assert_eq!(
        status_of(call(&app, &new, "new again")).await,
        StatusCode::NO_CONTENT
    );
    // The region, still signing with both, is heard.
    let second = app.create_org("us", "rotated-after", "After").await;
    assert_eq!(mapping(&app, second).await["name"], "After");
    app.shutdown().await;
}

mod sqlite {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn forged_rpcs_are_refused_and_write_nothing() {
        super::forged_rpcs_are_refused_and_write_nothing(DbBackend::Sqlite).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_rotated_key_is_accepted_during_the_rotation_and_refused_after() {
        super::a_rotated_key_is_accepted_during_the_rotation_and_refused_after(DbBackend::Sqlite)
            .await;
    }
}

mod postgres {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn forged_rpcs_are_refused_and_write_nothing() {
        super::forged_rpcs_are_refused_and_write_nothing(DbBackend::Postgres).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_rotated_key_is_accepted_during_the_rotation_and_refused_after() {
        super::a_rotated_key_is_accepted_during_the_rotation_and_refused_after(DbBackend::Postgres)
            .await;
    }
}
