//! End-to-end: Control and two regions in-process on ephemeral ports, driven
//! over HTTP. SQLite for everything, PostgreSQL for the replication suite.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use example_app::silo::Role;
use reqwest::StatusCode;
use sea_orm::{ConnectionTrait, DbBackend};
use serde_json::{json, Value};

mod admin_surface;
mod api_auth;
mod contracts;
mod deployment;
mod hostile;
mod hostile_rpc;
mod limits;
mod ops;
mod races;
mod rpc_auth;
mod rpc_calls;

use deployment::{fresh_client, Deployment, SECRET};

async fn organization_changes_reach_control_at_response_time(backend: DbBackend) {
    let app = Deployment::start(backend).await;
    let id = app.create_org("us", "acme", "Acme").await;
    let (status, mapping) = app
        .get(app.control_url(&format!("/api/0/organization-mappings/{id}")))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        mapping,
        json!({ "id": id, "slug": "acme", "name": "Acme", "region": "us" })
    );
    let (status, by_slug) = app
        .get(app.control_url("/api/0/organization-mappings?slug=acme"))
        .await;
    assert_eq!((status, by_slug["id"].as_i64()), (StatusCode::OK, Some(id)));

    let (status, _, _) = app
        .send(
            reqwest::Method::PUT,
            app.region_url("us", &format!("/api/0/organizations/{id}")),
            Some(json!({ "name": "Acme Inc" })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, mapping) = app
        .get(app.control_url(&format!("/api/0/organization-mappings/{id}")))
        .await;
    assert_eq!(mapping["name"], "Acme Inc");

    let (status, _, _) = app
        .send(
            reqwest::Method::DELETE,
            app.region_url("us", &format!("/api/0/organizations/{id}")),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = app
        .get(app.control_url(&format!("/api/0/organization-mappings/{id}")))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = app
        .get(app.region_url("us", &format!("/api/0/organizations/{id}")))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    app.shutdown().await;
}

/// Control rejects a replication call as too large (its body limit is below
/// the region's, which accepted the organization): a permanent error,
/// so the shard is quarantined, not retried for an hour in silence. The
/// admin surface shows it; once the data is fixed, an operator's retry
/// releases it and the fixed data replicates.
async fn a_rejected_replication_is_quarantined_until_an_operator_retries(backend: DbBackend) {
    // Misconfigured: control accepts smaller bodies than the regions.
    // Between the envelopes of the two calls below: the mapping's with a
    // `NAME_MAX` name (over 300 bytes) and with a short one (under 150,
    // with a PostgreSQL-sized id).
    let app = Deployment::start_with(backend, |config| {
        if config.role == Role::Control {
            config.body_limit = 256;
        }
    })
    .await;
    let name = "n".repeat(example_app::validate::NAME_MAX);
    let (status, body, headers) = app
        .send(
            reqwest::Method::POST,
            app.region_url("us", "/api/0/organizations"),
            Some(json!({ "slug": "big", "name": name })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(headers["outbox-flush"], "failed", "Control refused it");
    let id = body["id"].as_i64().unwrap();

    let (status, shards) = app.get(app.region_url("us", "/admin/outbox/shards")).await;
    assert_eq!(status, StatusCode::OK, "{shards}");
    // The organization's shard (its audit event, in a shard of its own, is
    // refused too).
    let failing: Vec<Value> = shards["failing"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["shard"]["identifier"] == id)
        .cloned()
        .collect();
    assert_eq!(failing.len(), 1, "{failing:?}");
    assert_eq!(failing[0]["state"]["status"], "quarantined");
    assert_eq!(failing[0]["state"]["next_attempt"], Value::Null);
    assert!(
        failing[0]["state"]["last_error"]
            .as_str()
            .unwrap()
            .contains("413"),
        "{failing:?}"
    );
    let shard = failing[0]["shard"].clone();

    // The fix: a shorter name. Its write waits behind the quarantine.
    let (status, _, headers) = app
        .send(
            reqwest::Method::PUT,
            app.region_url("us", &format!("/api/0/organizations/{id}")),
            Some(json!({ "name": "Big" })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        headers["outbox-flush"], "failed",
        "the shard is quarantined"
    );
    let mapping = app.control_url(&format!("/api/0/organization-mappings/{id}"));
    assert_eq!(app.get(mapping.clone()).await.0, StatusCode::NOT_FOUND);

    // Retrying needs the admin token.
    let retry = app.region_url("us", "/admin/outbox/shards/retry");
    // Refused before its body is read: a connection per request.
    let client = fresh_client();
    let response = client
        .post(&retry)
        .json(&json!({ "shards": [shard] }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let response = client
        .post(&retry)
        .bearer_auth(SECRET)
        .json(&json!({ "shards": [shard] }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let released: Value = response.json().await.unwrap();
    assert_eq!(released["released"], json!([shard]));
    app.eventually("the fixed organization replicates", || {
        let (app, mapping) = (&app, mapping.clone());
        async move { app.get(mapping).await.1["name"] == "Big" }
    })
    .await;
    // The delivery is committed just after the receiver ran.
    app.eventually("the shard is no longer failing", || async {
        let (_, shards) = app.get(app.region_url("us", "/admin/outbox/shards")).await;
        !shards["failing"]
            .as_array()
            .unwrap()
            .iter()
            .any(|entry| entry["shard"] == shard)
    })
    .await;
    app.shutdown().await;
}

/// Each region numbers its objects from its own database, yet no two
/// regions produce the same id: both organizations keep their mapping.
async fn organizations_of_two_regions_never_share_an_id(backend: DbBackend) {
    let app = Deployment::start(backend).await;
    let mut ids = Vec::new();
    for (region, slug) in [("us", "first-us"), ("de", "first-de"), ("us", "second-us")] {
        ids.push((region, slug, app.create_org(region, slug, slug).await));
    }
    let mut distinct: Vec<i64> = ids.iter().map(|(_, _, id)| *id).collect();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "{ids:?}");
    for (region, slug, id) in ids {
        let (status, mapping) = app
            .get(app.control_url(&format!("/api/0/organization-mappings/{id}")))
            .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            (mapping["region"].as_str(), mapping["slug"].as_str()),
            (Some(region), Some(slug))
        );
    }
    app.shutdown().await;
}

/// Two renames in a row: Control's mapping ends on the last, and its audit
/// log keeps every event in order. At response time when both responses
/// say their flush delivered; a response whose flush found its shard held
/// (by the background drain, woken by the previous flush's completion) says
/// `outbox-flush: deferred`, and then the drain delivers soon after.
async fn quick_renames_end_on_the_last_and_the_audit_log_keeps_every_event(backend: DbBackend) {
    let app = Deployment::start(backend).await;
    let id = app.create_org("de", "quick", "Q0").await;
    let mut deferred = false;
    for name in ["Q1", "Q2"] {
        let (status, _, headers) = app
            .send(
                reqwest::Method::PUT,
                app.region_url("de", &format!("/api/0/organizations/{id}")),
                Some(json!({ "name": name })),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        match headers
            .get("outbox-flush")
            .map(|value| value.to_str().unwrap())
        {
            None => {}
            Some("deferred") => deferred = true,
            Some(other) => panic!("unexpected outbox-flush: {other}"),
        }
    }
    let actions = || async {
        let (status, events) = app
            .get(app.control_url(&format!("/api/0/audit-logs?organization_id={id}")))
            .await;
        assert_eq!(status, StatusCode::OK);
        events
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                // Every request of the test carries the admin token.
                assert_eq!(e["actor"], "admin", "{e}");
                (
                    e["action"].as_str().unwrap().to_owned(),
                    e["detail"].as_str().unwrap().to_owned(),
                )
            })
            .collect::<Vec<(String, String)>>()
    };
    let expected = vec![
        ("organization.create".to_owned(), "created quick".to_owned()),
        (
            "organization.update".to_owned(),
            "now Q1 (quick)".to_owned(),
        ),
        (
            "organization.update".to_owned(),
            "now Q2 (quick)".to_owned(),
        ),
    ];
    let mapping = || async {
        app.get(app.control_url(&format!("/api/0/organization-mappings/{id}")))
            .await
            .1["name"]
            .clone()
    };
    if deferred {
        app.eventually("the deferred flush's delivery", || async {
            mapping().await == "Q2" && actions().await == expected
        })
        .await;
    }
    assert_eq!(mapping().await, "Q2");
    assert_eq!(actions().await, expected);
    app.shutdown().await;
}

async fn a_user_renamed_in_control_is_renamed_in_the_regions_of_their_organizations(
    backend: DbBackend,
) {
    let app = Deployment::start(backend).await;
    let (status, user, _) = app
        .send(
            reqwest::Method::POST,
            app.control_url("/api/0/users"),
            Some(json!({ "email": "ann@example.com", "name": "Ann" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let user_id = user["id"].as_i64().unwrap();
    for (region, slug) in [("us", "ann-us"), ("de", "ann-de")] {
        let org = app.create_org(region, slug, slug).await;
        let (status, _, _) = app
            .send(
                reqwest::Method::POST,
                app.region_url(region, &format!("/api/0/organizations/{org}/members")),
                Some(json!({ "user_id": user_id, "role": "owner" })),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED);
        let (status, replica) = app
            .get(app.region_url(region, &format!("/api/0/users/{user_id}")))
            .await;
        assert_eq!(
            (status, replica["name"].as_str()),
            (StatusCode::OK, Some("Ann")),
            "{region}"
        );
    }
    let (status, _, _) = app
        .send(
            reqwest::Method::PUT,
            app.control_url(&format!("/api/0/users/{user_id}")),
            Some(json!({ "name": "Ann B." })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    for region in ["us", "de"] {
        let (_, replica) = app
            .get(app.region_url(region, &format!("/api/0/users/{user_id}")))
            .await;
        assert_eq!(replica["name"], "Ann B.", "{region}");
    }
    app.shutdown().await;
}

async fn bulk_creation_reaches_control_through_the_background_drain(backend: DbBackend) {
    let app = Deployment::start(backend).await;
    let (status, created, _) = app
        .send(
            reqwest::Method::POST,
            app.region_url("us", "/api/0/organizations/bulk"),
            Some(json!([{ "slug": "b1", "name": "B1" }, { "slug": "b2", "name": "B2" }, { "slug": "b3", "name": "B3" }])),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let ids: Vec<i64> = created
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 3);
    for id in ids {
        app.eventually("bulk mapping", || async {
            app.get(app.control_url(&format!("/api/0/organization-mappings/{id}")))
                .await
                .0
                == StatusCode::OK
        })
        .await;
    }
    app.shutdown().await;
}

async fn writes_pile_up_while_control_is_down_and_arrive_in_order_after(backend: DbBackend) {
    let mut app = Deployment::start(backend).await;
    let id = app.create_org("us", "resilient", "R0").await;
    app.stop_control().await;
    for name in ["R1", "R2", "R3"] {
        let (status, _, headers) = app
            .send(
                reqwest::Method::PUT,
                app.region_url("us", &format!("/api/0/organizations/{id}")),
                Some(json!({ "name": name })),
            )
            .await;
        assert_eq!(
            status,
            StatusCode::OK,
            "region writes succeed while Control is down"
        );
        assert_eq!(headers.get("outbox-flush").unwrap(), "failed");
    }
    let (status, shards) = app.get(app.region_url("us", "/admin/outbox/shards")).await;
    assert_eq!(status, StatusCode::OK);
    let pending = shards["pending"]["value"].as_u64().unwrap();
    assert!(pending >= 4, "outbox rows pile up: {shards}");

    app.start_control().await;
    app.eventually("the last rename reaches Control", || async {
        app.get(app.control_url(&format!("/api/0/organization-mappings/{id}")))
            .await
            .1["name"]
            == "R3"
    })
    .await;
    app.eventually("every audit event reaches Control", || async {
        app.get(app.control_url(&format!("/api/0/audit-logs?organization_id={id}")))
            .await
            .1
            .as_array()
            .map_or(0, Vec::len)
            == 4
    })
    .await;
    let (_, events) = app
        .get(app.control_url(&format!("/api/0/audit-logs?organization_id={id}")))
        .await;
    let details: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["detail"].as_str().unwrap())
        .collect();
    assert_eq!(
        details,
        vec![
            "created resilient",
            "now R1 (resilient)",
            "now R2 (resilient)",
            "now R3 (resilient)"
        ]
    );
    app.eventually("the region outbox empties", || async {
        app.get(app.region_url("us", "/admin/outbox/shards"))
            .await
            .1["pending"]["value"]
            == 0
    })
    .await;
    app.shutdown().await;
}

mod sqlite {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn an_audit_event_of_a_newer_build_parks_and_an_older_one_is_upcast() {
        super::contracts::an_audit_event_of_a_newer_build_parks_and_an_older_one_is_upcast(
            DbBackend::Sqlite,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn hostile_requests_never_get_a_5xx_and_lose_nothing() {
        super::hostile::hostile_requests_never_get_a_5xx_and_lose_nothing(DbBackend::Sqlite).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn hostile_text_gets_400_and_writes_nothing() {
        super::hostile::hostile_text_gets_400_and_writes_nothing(DbBackend::Sqlite).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn organizations_of_two_regions_never_share_an_id() {
        super::organizations_of_two_regions_never_share_an_id(DbBackend::Sqlite).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_rejected_replication_is_quarantined_until_an_operator_retries() {
        super::a_rejected_replication_is_quarantined_until_an_operator_retries(DbBackend::Sqlite)
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn stalled_oversized_and_mistyped_bodies_get_408_413_415() {
        super::hostile::stalled_oversized_and_mistyped_bodies_get_408_413_415(DbBackend::Sqlite)
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn organization_changes_reach_control_at_response_time() {
        super::organization_changes_reach_control_at_response_time(DbBackend::Sqlite).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn quick_renames_end_on_the_last_and_the_audit_log_keeps_every_event() {
        super::quick_renames_end_on_the_last_and_the_audit_log_keeps_every_event(DbBackend::Sqlite)
            .await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_user_renamed_in_control_is_renamed_in_the_regions_of_their_organizations() {
        super::a_user_renamed_in_control_is_renamed_in_the_regions_of_their_organizations(
            DbBackend::Sqlite,
        )
        .await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn bulk_creation_reaches_control_through_the_background_drain() {
        super::bulk_creation_reaches_control_through_the_background_drain(DbBackend::Sqlite).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn writes_pile_up_while_control_is_down_and_arrive_in_order_after() {
        super::writes_pile_up_while_control_is_down_and_arrive_in_order_after(DbBackend::Sqlite)
            .await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn unsigned_rpc_is_refused_and_changes_nothing() {
        super::rpc_calls::unsigned_rpc_is_refused_and_changes_nothing(DbBackend::Sqlite).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn bad_requests_get_json_errors() {
        super::hostile::bad_requests_get_json_errors(DbBackend::Sqlite).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn rpcs_carry_their_message_id_and_a_redelivery_applies_nothing() {
        super::rpc_calls::rpcs_carry_their_message_id_and_a_redelivery_applies_nothing(
            DbBackend::Sqlite,
        )
        .await;
    }
}

/// The replication suite on PostgreSQL.
mod postgres {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn an_audit_event_of_a_newer_build_parks_and_an_older_one_is_upcast() {
        super::contracts::an_audit_event_of_a_newer_build_parks_and_an_older_one_is_upcast(
            DbBackend::Postgres,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn hostile_requests_never_get_a_5xx_and_lose_nothing() {
        super::hostile::hostile_requests_never_get_a_5xx_and_lose_nothing(DbBackend::Postgres)
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn hostile_text_gets_400_and_writes_nothing() {
        super::hostile::hostile_text_gets_400_and_writes_nothing(DbBackend::Postgres).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn organizations_of_two_regions_never_share_an_id() {
        super::organizations_of_two_regions_never_share_an_id(DbBackend::Postgres).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn rpcs_carry_their_message_id_and_a_redelivery_applies_nothing() {
        super::rpc_calls::rpcs_carry_their_message_id_and_a_redelivery_applies_nothing(
            DbBackend::Postgres,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_rejected_replication_is_quarantined_until_an_operator_retries() {
        super::a_rejected_replication_is_quarantined_until_an_operator_retries(DbBackend::Postgres)
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn stalled_oversized_and_mistyped_bodies_get_408_413_415() {
        super::hostile::stalled_oversized_and_mistyped_bodies_get_408_413_415(DbBackend::Postgres)
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn organization_changes_reach_control_at_response_time() {
        super::organization_changes_reach_control_at_response_time(DbBackend::Postgres).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn quick_renames_end_on_the_last_and_the_audit_log_keeps_every_event() {
        super::quick_renames_end_on_the_last_and_the_audit_log_keeps_every_event(
            DbBackend::Postgres,
        )
        .await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_user_renamed_in_control_is_renamed_in_the_regions_of_their_organizations() {
        super::a_user_renamed_in_control_is_renamed_in_the_regions_of_their_organizations(
            DbBackend::Postgres,
        )
        .await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn bulk_creation_reaches_control_through_the_background_drain() {
        super::bulk_creation_reaches_control_through_the_background_drain(DbBackend::Postgres)
            .await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn writes_pile_up_while_control_is_down_and_arrive_in_order_after() {
        super::writes_pile_up_while_control_is_down_and_arrive_in_order_after(DbBackend::Postgres)
            .await;
    }
}
