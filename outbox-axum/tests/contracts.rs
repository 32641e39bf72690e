//! A rolling deploy on PostgreSQL and SQLite: a producer a version ahead of
//! its receiver parks the shard it wrote (nothing lost, nothing delivered to
//! the wrong type), `GET /health` and the dashboard name it, and the
//! receiver that knows the version delivers it, older rows upcast.

#![allow(clippy::unwrap_used, missing_docs)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use outbox_axum::admin::{Admin, BearerToken};
use outbox_core::{
    DrainConfig, Drainer, HandlerError, ManualClock, Message, OutboxKind, Receivers,
};
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, SeaOrmStore, ShardId, WriteError};
use outbox_testing::database::{DbBackend, TestDatabase};
use serde_json::{json, Value};
use tower::ServiceExt;

use outbox_testing::contracts::{OrgV2, OrgV3};

/// The build from before the category was typed.
mod untyped {
    outbox_core::registry! {
        OrgScope = 0 (shard_field = "organization_id") {
            OrgUpdate = 1,
        }
    }
}

/// Last week's build, still draining.
mod last_week {
    outbox_core::registry! {
        OrgScope = 0 (shard_field = "organization_id") {
            OrgUpdate = 1 (payload = super::OrgV2),
        }
    }
}

/// Next week's build, deployed first where the writes happen.
mod next_week {
    outbox_core::registry! {
        OrgScope = 0 (shard_field = "organization_id") {
            OrgUpdate = 1 (payload = super::OrgV3),
        }
    }
}

const TOKEN: &str = "the contracts test's operator token!";
const PARK: Duration = Duration::from_secs(30);

type Seen<T> = Arc<Mutex<Vec<(i64, T)>>>;

async fn get(app: &Router, uri: &str, headers: &[(&str, &str)]) -> (StatusCode, String) {
    let mut request = Request::builder().method(Method::GET).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

async fn dashboard(app: &Router) -> String {
    let login = app
        .clone()
        .oneshot(
            Request::builder()
                .method(Method::POST)
                .uri("/admin/login")
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(format!("token={TOKEN}")))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::SEE_OTHER);
    let cookie = login.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let (status, page) = get(app, "/admin/dashboard?kind=region", &[("cookie", &cookie)]).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page
}

async fn a_producer_ahead_parks_until_the_receiver_is_deployed(backend: DbBackend) {
    let t = TestDatabase::of(backend, "contracts_rolling")
        .await
        .unwrap();
    // Shard 1: before the category was typed. Shard 2: last week's
    // producer. Shard 3: next week's producer, then last week's.
    let legacy = OutboxMessage::new(untyped::OutboxCategory::OrgUpdate, ShardId(1), ObjectId(10))
        .with_payload(json!({ "name": "legacy" }));
    write_region(&t.db, legacy).await.unwrap();
    let current = OrgV2 {
        name: "current".into(),
        seats: 5,
    };
    let ahead = OrgV3 {
        display_name: "ahead".into(),
        seats: 7,
    };
    let behind = OrgV2 {
        name: "behind".into(),
        seats: 2,
    };
    let typed = |shard, object, payload: &OrgV2| {
        OutboxMessage::typed(
            last_week::outbox_categories::OrgUpdate,
            ShardId(shard),
            ObjectId(object),
            payload,
        )
        .unwrap()
    };
    write_region(&t.db, typed(2, 20, &current)).await.unwrap();
    write_region(
        &t.db,
        OutboxMessage::typed(
            next_week::outbox_categories::OrgUpdate,
            ShardId(3),
            ObjectId(30),
            &ahead,
        )
        .unwrap(),
    )
    .await
    .unwrap();
    write_region(&t.db, typed(3, 31, &behind)).await.unwrap();
    // A typed category is not written untyped: refused, nothing written.
    let untyped_write = OutboxMessage::new(
        last_week::OutboxCategory::OrgUpdate,
        ShardId(4),
        ObjectId(40),
    )
    .with_payload(json!({ "name": "no version" }));
    assert!(matches!(
        write_region(&t.db, untyped_write).await,
        Err(WriteError::UntypedWrite { .. })
    ));

    let clock = ManualClock::starting_now();
    let old_seen: Seen<OrgV2> = Arc::default();
    let receivers = Receivers::new().on_typed(last_week::outbox_categories::OrgUpdate, {
        let seen = old_seen.clone();
        move |message: Message<last_week::OutboxCategory>, org: OrgV2| {
            seen.lock().unwrap().push((message.object_identifier, org));
            async { Ok::<_, HandlerError>(()) }
        }
    });
    let old = Drainer::builder(SeaOrmStore::new(t.db.clone()).unwrap(), receivers)
        .config(DrainConfig::default().park_interval(PARK))
        .clock(clock.clone())
        .dead_letter(last_week::OutboxScope::OrgScope, 1)
        .build();
    let report = old.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.failures.len(), 1, "{report:?}");
    assert!(!report.failures[0].dead_lettered);
    assert_eq!(
        // Different shards: delivered concurrently, in no order.
        sorted(&old_seen),
        [
            (
                10,
                OrgV2 {
                    name: "legacy".into(),
                    seats: 1
                }
            ),
            (20, current.clone())
        ]
    );

    // The admin surface names the parked shard.
    let app = Router::new()
        .nest(
            "/admin",
            Admin::new(old.clone()).router(BearerToken::new(TOKEN).unwrap()),
        )
        .layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 1))));
    let bearer = format!("Bearer {TOKEN}");
    let (status, health) = get(&app, "/admin/health", &[("authorization", &bearer)]).await;
    assert_eq!(status, StatusCode::OK, "{health}");
    let health: Value = serde_json::from_str(&health).unwrap();
    let region = &health["backlogs"][0];
    assert_eq!(region["kind"], "region");
    assert_eq!(region["parked_shards"], 1, "{health}");
    assert_eq!(region["failing_shards"], 0, "{health}");
    let parked = health["parked"].as_array().unwrap();
    assert_eq!(parked.len(), 1, "{health}");
    assert_eq!(parked[0]["shard"]["identifier"], 3);
    assert_eq!(parked[0]["state"]["status"], "parked");
    assert_eq!(parked[0]["state"]["attempts"], 0);
    let error = parked[0]["state"]["last_error"].as_str().unwrap();
    assert!(
        error.contains("OrgUpdate") && error.contains("version 3"),
        "{error}"
    );
    assert!(error.contains("deploy the receiver"), "{error}");
    let page = dashboard(&app).await;
    assert!(page.contains("parked: deploy the receiver"), "{page}");
    assert!(page.contains("version 3"), "{page}");

    // The upgrade: next week's receiver, once the park interval is over.
    clock.advance(PARK + Duration::from_secs(1));
    let new_seen: Seen<OrgV3> = Arc::default();
    let receivers = Receivers::new().on_typed(next_week::outbox_categories::OrgUpdate, {
        let seen = new_seen.clone();
        move |message: Message<next_week::OutboxCategory>, org: OrgV3| {
            seen.lock().unwrap().push((message.object_identifier, org));
            async { Ok::<_, HandlerError>(()) }
        }
    });
    let new = Drainer::builder(SeaOrmStore::new(t.db.clone()).unwrap(), receivers)
        .config(DrainConfig::default().park_interval(PARK))
        .clock(clock.clone())
        .build();
    let report = new.drain_due(OutboxKind::Region).await.unwrap();
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(
        *new_seen.lock().unwrap(),
        [
            (30, ahead),
            (
                31,
                OrgV3 {
                    display_name: "behind".into(),
                    seats: 2
                }
            )
        ]
    );
    assert_eq!(old_seen.lock().unwrap().len(), 2, "never the wrong type");
    let (_, health) = get(&app, "/admin/health", &[("authorization", &bearer)]).await;
    let health: Value = serde_json::from_str(&health).unwrap();
    assert_eq!(health["parked"], json!([]), "{health}");
    assert_eq!(health["backlogs"][0]["parked_shards"], 0);
}

outbox_testing::on_both_backends!(a_producer_ahead_parks_until_the_receiver_is_deployed);

/// What `seen` recorded, by object: for deliveries of different shards.
fn sorted<T: Clone>(seen: &Seen<T>) -> Vec<(i64, T)> {
    let mut seen = seen.lock().unwrap().clone();
    seen.sort_by_key(|(object, _)| *object);
    seen
}
