//! The audit event's contract across a rolling deploy of a region: an
//! event written before the category was typed (version 1) reaches Control
//! upcast, with no actor; one written by a newer build (version 3) parks
//! its shard, named in the region's `/health`, and never reaches Control
//! as the wrong type.

use outbox_core::contract::Upcasts;
use outbox_core::schemars::JsonSchema;
use outbox_core::Contract;
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId};
use reqwest::StatusCode;
use sea_orm::DbBackend;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use example_app::contracts::AuditEventV2;

use super::deployment::{fresh_client, Deployment, SECRET};

/// The region build from before the audit event was typed.
mod untyped {
    outbox_core::registry! {
        AuditLogScope = 2 { AuditLogEvent = 20 }
    }
}

/// A region build from next month: version 3 of the event.
#[derive(Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "outbox_core::schemars")]
pub struct AuditEventV3 {
    organization_id: i64,
    action: String,
    detail: String,
    occurred_at: String,
    actor: Option<String>,
    request_id: String,
}

impl From<AuditEventV2> for AuditEventV3 {
    fn from(v2: AuditEventV2) -> Self {
        Self {
            organization_id: v2.organization_id,
            action: v2.action,
            detail: v2.detail,
            occurred_at: v2.occurred_at,
            actor: v2.actor,
            request_id: String::new(),
        }
    }
}

impl Contract for AuditEventV3 {
    const VERSION: u32 = 3;
    fn older() -> Upcasts<Self> {
        Upcasts::from::<AuditEventV2>()
    }
}

mod next_month {
    outbox_core::registry! {
        AuditLogScope = 2 { AuditLogEvent = 20 (payload = super::AuditEventV3) }
    }
}

fn event_id() -> i64 {
    (rand::random::<u64>() >> 2) as i64
}

pub(crate) async fn an_audit_event_of_a_newer_build_parks_and_an_older_one_is_upcast(
    backend: DbBackend,
) {
    let app = Deployment::start(backend).await;
    let id = app.create_org("de", "contracts", "Contracts").await;
    let de = &app.regions["de"].db;
    let legacy = event_id();
    write_region(
        de,
        OutboxMessage::new(
            untyped::OutboxCategory::AuditLogEvent,
            ShardId(legacy),
            ObjectId(legacy),
        )
        .with_payload(json!({
            "organization_id": id, "action": "legacy.event", "detail": "written untyped",
            "occurred_at": "2026-11-01T00:00:00Z",
        })),
    )
    .await
    .unwrap();
    let ahead = event_id();
    let newer = AuditEventV3 {
        organization_id: id,
        action: "newer.event".into(),
        detail: "written by next month's build".into(),
        occurred_at: "2026-12-01T00:00:00Z".into(),
        actor: Some("admin".into()),
        request_id: "req-1".into(),
    };
    write_region(
        de,
        OutboxMessage::typed(
            next_month::outbox_categories::AuditLogEvent,
            ShardId(ahead),
            ObjectId(ahead),
            &newer,
        )
        .unwrap(),
    )
    .await
    .unwrap();

    let events = || async {
        let (status, events) = app
            .get(app.control_url(&format!("/api/0/audit-logs?organization_id={id}")))
            .await;
        assert_eq!(status, StatusCode::OK);
        events.as_array().unwrap().clone()
    };
    let parked = || async {
        let health: Value = fresh_client()
            .get(app.region_url("de", "/admin/outbox/health"))
            .bearer_auth(SECRET)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        health["parked"].as_array().cloned().unwrap_or_default()
    };
    // The background drain delivers the version-1 event and parks the
    // version-3 one.
    app.eventually("the version-1 event reaches Control", || async {
        events().await.len() == 2
    })
    .await;
    app.eventually("the version-3 event's shard is parked", || async {
        !parked().await.is_empty()
    })
    .await;
    let events = events().await;
    let seen: Vec<(&str, &Value)> = events
        .iter()
        .map(|event| (event["action"].as_str().unwrap(), &event["actor"]))
        .collect();
    // In the region's order: the create, then the untyped event.
    assert_eq!(
        seen,
        [
            ("organization.create", &json!("admin")),
            ("legacy.event", &Value::Null)
        ],
        "{events:?}"
    );
    let parked = parked().await;
    assert_eq!(parked.len(), 1, "{parked:?}");
    assert_eq!(parked[0]["shard"]["identifier"], ahead);
    assert_eq!(parked[0]["state"]["attempts"], 0);
    let error = parked[0]["state"]["last_error"].as_str().unwrap();
    assert!(
        error.contains("AuditLogEvent")
            && error.contains("version 3")
            && error.contains("[1, 2]")
            && error.contains("deploy the receiver"),
        "{error}"
    );

    // The region's AsyncAPI document publishes both versions' schemas.
    let document: Value = fresh_client()
        .get(app.region_url("de", "/admin/outbox/asyncapi.json"))
        .bearer_auth(SECRET)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let messages = &document["components"]["messages"];
    for version in ["AuditLogEvent.v1", "AuditLogEvent.v2"] {
        assert!(messages[version].is_object(), "{version}: {messages}");
    }
    app.shutdown().await;
}
