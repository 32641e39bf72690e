//! `GET /history`: the samples workers recorded, merged per time.

use axum::http::{Method, StatusCode};
use chrono::{DateTime, Utc};
use outbox_core::history::Sample;
use outbox_core::store::StoreAdmin;
use outbox_core::OutboxKind;

use super::{call, setup, DbBackend, TOKEN};

fn sample(now: DateTime<Utc>, minutes_ago: i64, owner: &str, depth: u64, delivered: u64) -> Sample {
    let at = now - chrono::Duration::minutes(minutes_ago);
    Sample {
        at: chrono::DateTime::from_timestamp(at.timestamp() / 15 * 15, 0).unwrap(),
        kind: OutboxKind::Region,
        scope: None,
        owner: owner.to_owned(),
        depth,
        oldest_age: Some(std::time::Duration::from_millis(1500)),
        delivered,
        failed: 0,
        dead_lettered: 0,
        dead_letters: 0,
    }
}

pub(super) async fn the_history_route_merges_every_workers_samples(backend: DbBackend) {
    let setup = setup(backend, "admin_history", &[]).await;
    let store = setup.db.store();
    let now = Utc::now();
    let old = now - chrono::Duration::days(1);
    store
        .record_history(
            &[
                sample(now, 30, "a", 40, 3),
                sample(now, 30, "b", 42, 4),
                sample(now, 5, "a", 2, 9),
                sample(now, 300, "a", 1, 1),
            ],
            old,
        )
        .await
        .unwrap();
    let (status, history) = call(
        &setup.router,
        Method::GET,
        "/history?minutes=60",
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{history}");
    let points: Vec<(u64, u64)> = history["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["depth"].as_u64().unwrap(),
                p["delivered"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(points, [(42, 7), (2, 9)], "{history}");
    assert_eq!(history["points"][0]["oldest_age_seconds"], 1.5);
    assert_eq!(history["kind"], "region");
    let (_, day) = call(
        &setup.router,
        Method::GET,
        "/history?minutes=1440",
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(day["points"].as_array().unwrap().len(), 3);
    for bad in [
        "/history?minutes=0",
        "/history?minutes=99999",
        "/history?kind=moon",
    ] {
        let (status, error) = call(&setup.router, Method::GET, bad, Some(TOKEN), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {error}");
    }
}
