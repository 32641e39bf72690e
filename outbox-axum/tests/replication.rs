//! A replicated model saved in a request is replicated when the response returns.

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::Path;
use axum::http::{Request, StatusCode};
use axum::routing::{delete, post};
use axum::Router;
use outbox_axum::{OutboxLayer, Tx};
use outbox_core::{Drainer, HandlerError, Receivers};
use outbox_seaorm::replication::{RegionReplication, ReplicationReceivers};
use outbox_seaorm::SeaOrmStore;
use outbox_testing::database::TestDatabase;
use sea_orm::{ActiveModelTrait, ConnectionTrait, DbBackend, Set};
use tower::ServiceExt;

outbox_core::registry! {
    OrganizationScope = 0 (shard_field = "organization_id", owner_table = "organization") {
        OrganizationUpdate = 1,
    }
}

/// The "control silo": organization id → name, and tombstones.
#[derive(Default)]
pub struct Control {
    mappings: Mutex<Vec<(i64, String)>>,
    tombstones: Mutex<Vec<(i64, Option<serde_json::Value>)>>,
    /// Replications applied so far, for tests to wait on.
    replicated: tokio::sync::watch::Sender<usize>,
}

pub mod organization {
    use super::*;
    use sea_orm::entity::prelude::*;

    #[derive(
        Clone,
        Debug,
        PartialEq,
        DeriveEntityModel,
        outbox_seaorm::replication::ReplicatedRegionModel,
    )]
    #[sea_orm(table_name = "organization")]
    #[outbox(category = OutboxCategory::OrganizationUpdate, context = Control, active_model_behavior)]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        pub name: String,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    #[async_trait::async_trait]
    impl RegionReplication for Model {
        fn payload_for_update(&self) -> Option<serde_json::Value> {
            Some(serde_json::json!({ "name": self.name }))
        }

        async fn handle_async_replication(
            &self,
            control: &Control,
            _shard: i64,
        ) -> Result<(), HandlerError> {
            {
                let mut mappings = control.mappings.lock().unwrap();
                mappings.retain(|(id, _)| *id != self.id);
                mappings.push((self.id, self.name.clone()));
            }
            control.replicated.send_modify(|count| *count += 1);
            Ok(())
        }

        async fn handle_async_deletion(
            control: &Control,
            id: i64,
            _shard: i64,
            payload: Option<serde_json::Value>,
        ) -> Result<(), HandlerError> {
            control
                .mappings
                .lock()
                .unwrap()
                .retain(|(mapped, _)| *mapped != id);
            control.tombstones.lock().unwrap().push((id, payload));
            Ok(())
        }
    }
}

async fn create(tx: Tx, Path(name): Path<String>) -> (StatusCode, String) {
    let org = organization::ActiveModel {
        name: Set(name),
        ..Default::default()
    }
    .insert(&tx)
    .await
    .unwrap();
    (StatusCode::CREATED, org.id.to_string())
}

async fn remove(tx: Tx, Path(id): Path<i64>) -> StatusCode {
    organization::ActiveModel {
        id: Set(id),
        ..Default::default()
    }
    .delete(&tx)
    .await
    .unwrap();
    StatusCode::NO_CONTENT
}

async fn replicated_effect_is_visible_when_the_response_returns(backend: DbBackend) {
    let db = TestDatabase::of(backend, "axum_replication").await.unwrap();
    let id = match backend {
        DbBackend::Postgres => "bigserial PRIMARY KEY",
        _ => "INTEGER PRIMARY KEY AUTOINCREMENT",
    };
    db.db
        .execute_unprepared(&format!(
            "CREATE TABLE organization (id {id}, name text NOT NULL)"
        ))
        .await
        .unwrap();
    let control = Arc::new(Control::default());
    let receivers =
        Receivers::new().replicate::<organization::Model>(db.db.clone(), control.clone());
    let drainer = Drainer::new(SeaOrmStore::new(db.db.clone()).unwrap(), receivers);
    let app = Router::new()
        .route("/organizations/{name}", post(create))
        .route("/organizations/by-id/{id}", delete(remove))
        .layer(OutboxLayer::from_parts(db.db.clone(), drainer));

    let response = app
        .clone()
        .oneshot(
            Request::post("/organizations/acme")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let org_id: i64 = String::from_utf8_lossy(&body).parse().unwrap();
    assert_eq!(
        *control.mappings.lock().unwrap(),
        vec![(org_id, "acme".to_owned())]
    );

    let response = app
        .oneshot(
            Request::delete(format!("/organizations/by-id/{org_id}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert!(control.mappings.lock().unwrap().is_empty());
    assert_eq!(
        *control.tombstones.lock().unwrap(),
        vec![(org_id, Some(serde_json::json!({ "name": "acme" })))]
    );
}

outbox_testing::on_both_backends!(replicated_effect_is_visible_when_the_response_returns);

async fn the_worker_backfills_existing_rows_once_the_option_allows_it(backend: DbBackend) {
    use outbox_axum::OutboxWorker;
    use outbox_seaorm::backfill::{set_target_version, Backfill};
    use std::time::Duration;

    let db = TestDatabase::of(backend, "axum_backfill").await.unwrap();
    let id = match backend {
        DbBackend::Postgres => "bigserial PRIMARY KEY",
        _ => "INTEGER PRIMARY KEY AUTOINCREMENT",
    };
    db.db
        .execute_unprepared(&format!(
            "CREATE TABLE organization (id {id}, name text NOT NULL)"
        ))
        .await
        .unwrap();
    // Rows from before the model replicated: no outbox rows.
    for name in ["a", "b", "c"] {
        db.db
            .execute_unprepared(&format!(
                "INSERT INTO organization (name) VALUES ('{name}')"
            ))
            .await
            .unwrap();
    }
    set_target_version(&db.db, "organization", 1).await.unwrap();
    let control = Arc::new(Control::default());
    let receivers =
        Receivers::new().replicate::<organization::Model>(db.db.clone(), control.clone());
    let worker = OutboxWorker::builder(db.db.clone(), receivers)
        .backfill(Backfill::new().model::<organization::Model>())
        .poll_interval(Duration::from_millis(20))
        .spawn()
        .await
        .unwrap();
    // The backfill runs at start, then every interval: a row it missed
    // would come one interval later.
    let bound = outbox_axum::worker::DEFAULT_BACKFILL_INTERVAL;
    let started = std::time::Instant::now();
    let mut replicated = control.replicated.subscribe();
    let all = replicated.wait_for(|_| control.mappings.lock().unwrap().len() == 3);
    if tokio::time::timeout(bound, all).await.is_err() {
        panic!(
            "{} of 3 rows replicated after {:.1?} (bound {bound:?}, the backfill interval)",
            control.mappings.lock().unwrap().len(),
            started.elapsed()
        );
    }
    let mut names: Vec<String> = control
        .mappings
        .lock()
        .unwrap()
        .iter()
        .map(|(_, n)| n.clone())
        .collect();
    names.sort();
    assert_eq!(names, vec!["a", "b", "c"]);
    let status = worker.backfill().unwrap().status(&db.db).await.unwrap();
    assert!(status[0].done);
    worker.shutdown().await;
}

mod backfill {
    outbox_testing::on_both_backends!(the_worker_backfills_existing_rows_once_the_option_allows_it);
    use super::*;
}
