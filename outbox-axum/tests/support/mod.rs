//! A small app with `OutboxLayer`, on PostgreSQL or SQLite.

#![allow(dead_code, missing_docs, clippy::unwrap_used)]

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{middleware, Router};
use http_body_util::BodyExt;
use outbox_axum::{deferred, OutboxCtx, OutboxLayer, Tx};
use outbox_core::{Drainer, OutboxKind};
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, SeaOrmStore, ShardId};
use outbox_testing::database::TestDatabase;
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use tokio::sync::Notify;
use tower::ServiceExt;

outbox_core::registry! {
    OrganizationScope = 0 (shard_field = "organization_id") {
        OrganizationUpdate = 1,
        OrganizationAudit = 2,
    }
}

pub type Recorder = outbox_testing::Recorder<OutboxCategory>;

#[derive(Clone, Default)]
pub struct Signals {
    pub entered: Arc<Notify>,
    pub proceed: Arc<Notify>,
}

pub struct TestApp {
    pub db: TestDatabase,
    pub backend: DbBackend,
    pub recorder: Recorder,
    pub drainer: Drainer<OutboxCategory>,
    pub signals: Signals,
}

impl TestApp {
    pub async fn new(backend: DbBackend, label: &str) -> Self {
        let db = TestDatabase::of(backend, label).await.unwrap();
        let ddl = match backend {
            DbBackend::Postgres => "CREATE TABLE widgets (id bigserial PRIMARY KEY, organization_id bigint NOT NULL, name text NOT NULL UNIQUE)",
            _ => "CREATE TABLE widgets (id INTEGER PRIMARY KEY AUTOINCREMENT, organization_id bigint NOT NULL, name text NOT NULL UNIQUE)",
        };
        db.db.execute_unprepared(ddl).await.unwrap();
        let recorder = Recorder::new();
        let drainer = Drainer::new(
            SeaOrmStore::new(db.db.clone()).unwrap(),
            recorder.receivers(),
        );
        Self {
            db,
            backend,
            recorder,
            drainer,
            signals: Signals::default(),
        }
    }

    pub fn layer(&self) -> OutboxLayer<OutboxCategory> {
        OutboxLayer::from_parts(self.db.db.clone(), self.drainer.clone())
    }

    /// The routes, without the layer.
    pub fn routes(&self) -> Router {
        Router::new()
            .route("/widgets/{org}/{name}", post(create_widget))
            .route("/status/{code}/{org}/{name}", post(create_then_answer))
            .route("/panic/{org}/{name}", post(create_then_panic))
            .route("/hang/{org}/{name}", post(create_then_hang))
            .route("/ctx-deferred/{org}/{name}", post(create_deferred_by_ctx))
            .route("/nested/{org}/{name}", post(create_with_nested_deferral))
            .route("/leak/{org}/{name}", post(create_and_leak_tx))
            .route("/read-then-write/{org}/{name}", post(read_then_create))
            .route("/json/{org}", post(create_from_json))
            .route(
                "/commit-fails/{org}/{name}",
                post(create_then_break_a_deferred_constraint),
            )
            .merge(
                Router::new()
                    .route("/bulk/{org}/{name}", post(create_widget))
                    .route_layer(middleware::from_fn(outbox_axum::defer_flush)),
            )
            .with_state(self.signals.clone())
    }

    pub fn app(&self) -> Router {
        self.routes().layer(self.layer())
    }

    pub async fn widgets(&self) -> i64 {
        let row = self
            .db
            .db
            .query_one_raw(Statement::from_string(
                self.backend,
                "SELECT count(*) AS n FROM widgets",
            ))
            .await
            .unwrap()
            .unwrap();
        row.try_get("", "n").unwrap()
    }

    /// Rows not delivered yet, once the flushes delivered so far have
    /// completed (their delete runs in the background).
    pub async fn pending(&self) -> u64 {
        self.drainer.settled().await;
        self.drainer
            .view()
            .pending_count(OutboxKind::Region)
            .await
            .unwrap()
    }
}

pub async fn send(app: Router, uri: &str) -> (StatusCode, String, Option<String>) {
    let response = app
        .oneshot(Request::post(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let flush = response
        .headers()
        .get("outbox-flush")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned(), flush)
}

async fn insert_widget(tx: &Tx, org: i64, name: &str) -> Result<i64, Response> {
    let backend = tx.get_database_backend();
    let row = tx
        .query_one_raw(Statement::from_sql_and_values(
            backend,
            "INSERT INTO widgets (organization_id, name) VALUES ($1, $2) RETURNING id",
            [org.into(), name.into()],
        ))
        .await
        .map_err(|e| (StatusCode::CONFLICT, e.to_string()).into_response())?
        .ok_or_else(|| StatusCode::INTERNAL_SERVER_ERROR.into_response())?;
    let id: i64 = row.try_get("", "id").unwrap();
    write_region(
        tx,
        OutboxMessage::new(
            OutboxCategory::OrganizationUpdate,
            ShardId(org),
            ObjectId(id),
        )
        .with_payload(serde_json::json!({ "name": name })),
    )
    .await
    .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response())?;
    Ok(id)
}

async fn create_widget(tx: Tx, Path((org, name)): Path<(i64, String)>) -> Response {
    match insert_widget(&tx, org, &name).await {
        Ok(id) => (StatusCode::CREATED, id.to_string()).into_response(),
        Err(response) => response,
    }
}

/// `Tx` first, then a JSON body (axum extracts the body last).
async fn create_from_json(
    tx: Tx,
    Path(org): Path<i64>,
    axum::Json(body): axum::Json<serde_json::Value>,
) -> Response {
    let name = body["name"].as_str().unwrap_or("unnamed").to_owned();
    match insert_widget(&tx, org, &name).await {
        Ok(id) => (StatusCode::CREATED, id.to_string()).into_response(),
        Err(response) => response,
    }
}

async fn create_then_answer(tx: Tx, Path((code, org, name)): Path<(u16, i64, String)>) -> Response {
    if let Err(response) = insert_widget(&tx, org, &name).await {
        return response;
    }
    StatusCode::from_u16(code).unwrap().into_response()
}

async fn create_then_panic(tx: Tx, Path((org, name)): Path<(i64, String)>) -> Response {
    insert_widget(&tx, org, &name).await.unwrap();
    panic!("handler bug after writing");
}

async fn create_then_hang(
    State(signals): State<Signals>,
    tx: Tx,
    Path((org, name)): Path<(i64, String)>,
) -> Response {
    insert_widget(&tx, org, &name).await.unwrap();
    signals.entered.notify_one();
    std::future::pending::<()>().await;
    StatusCode::OK.into_response()
}

/// Reads, waits for the test's go-ahead, then writes.
async fn read_then_create(
    State(signals): State<Signals>,
    tx: Tx,
    Path((org, name)): Path<(i64, String)>,
) -> Response {
    let backend = tx.get_database_backend();
    tx.query_one_raw(Statement::from_string(
        backend,
        "SELECT count(*) AS n FROM widgets",
    ))
    .await
    .unwrap();
    signals.entered.notify_one();
    signals.proceed.notified().await;
    match insert_widget(&tx, org, &name).await {
        Ok(id) => (StatusCode::CREATED, id.to_string()).into_response(),
        Err(response) => response,
    }
}

async fn create_deferred_by_ctx(
    ctx: OutboxCtx,
    tx: Tx,
    Path((org, name)): Path<(i64, String)>,
) -> Response {
    ctx.defer_flush();
    match insert_widget(&tx, org, &name).await {
        Ok(_) => StatusCode::ACCEPTED.into_response(),
        Err(response) => response,
    }
}

async fn create_with_nested_deferral(tx: Tx, Path((org, name)): Path<(i64, String)>) -> Response {
    insert_widget(&tx, org, &name).await.unwrap();
    // Only the audit row, written inside `deferred`, waits for the background drain.
    deferred(async {
        write_region(
            &tx,
            OutboxMessage::new(
                OutboxCategory::OrganizationAudit,
                ShardId(org + 1000),
                ObjectId(1),
            ),
        )
        .await
        .unwrap();
    })
    .await;
    StatusCode::CREATED.into_response()
}

/// Writes a widget, then hands `Tx` to a task that keeps it past the
/// response until `proceed`, drops it, and says so with `entered`.
async fn create_and_leak_tx(
    State(signals): State<Signals>,
    tx: Tx,
    Path((org, name)): Path<(i64, String)>,
) -> Response {
    insert_widget(&tx, org, &name).await.unwrap();
    tokio::spawn(async move {
        signals.proceed.notified().await;
        drop(tx);
        signals.entered.notify_one();
    });
    StatusCode::OK.into_response()
}

/// Writes a widget and its outbox row, then violates a constraint that
/// PostgreSQL checks only at commit (`DEFERRABLE INITIALLY DEFERRED`).
async fn create_then_break_a_deferred_constraint(
    tx: Tx,
    Path((org, name)): Path<(i64, String)>,
) -> Response {
    insert_widget(&tx, org, &name).await.unwrap();
    tx.execute_unprepared("INSERT INTO checked_at_commit (v) VALUES (1), (1)")
        .await
        .unwrap();
    StatusCode::CREATED.into_response()
}
