//! Starting one silo: database, migrations, outbox worker, HTTP server.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use outbox_axum::OutboxWorker;
use outbox_core::{Drainer, OutboxKind};
use outbox_seaorm::backfill::Backfill;
use sea_orm::{ConnectOptions, Database, DatabaseConnection, DbBackend};
use sea_orm_migration::MigratorTrait;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower_http::timeout::RequestBodyTimeoutLayer;

use crate::control::{self, ControlContext};
use crate::error::ApiError;
use crate::migrations::{ControlMigrator, RegionMigrator};
use crate::region::{self, RegionContext};
use crate::registry::OutboxCategory;
use crate::rpc::RpcClient;

/// Which silo to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// The control silo.
    Control,
    /// A region silo, by name.
    Region(String),
}

/// How to run one silo.
#[derive(Clone, Debug)]
pub struct SiloConfig {
    /// Control or a region.
    pub role: Role,
    /// Its database (`sqlite://path?mode=rwc` or `postgres://...`).
    pub database_url: String,
    /// Where its outbox worker `LISTEN`s on PostgreSQL, if not through the
    /// database URL (which may go through a transaction-pooling proxy).
    pub listen_url: Option<String>,
    /// The shared RPC secret.
    pub secret: String,
    /// Control's base URL (regions call it).
    pub control_url: String,
    /// Each region's base URL (Control calls them).
    pub region_urls: BTreeMap<String, String>,
    /// How often an idle drain looks for work without being woken.
    pub poll_interval: Duration,
    /// How long a client may take to send a request body. The request's
    /// transaction begins only with its first statement, after the body is
    /// read, so a stalled upload holds no connection; this bound also frees
    /// the task and the socket (the request fails with 408).
    pub body_timeout: Duration,
    /// The largest request body accepted, in bytes (413 beyond). Every silo
    /// should have the same: a replication call carries what a silo
    /// accepted, and one refused by another silo is quarantined.
    pub body_limit: usize,
}

/// Default [`SiloConfig::body_limit`]: 1 MiB (a bulk creation of
/// `validate::BULK_MAX` organizations fits).
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

/// Why a silo did not start.
#[derive(Debug, thiserror::Error)]
pub enum SiloError {
    /// The database could not be opened or migrated.
    #[error("database {url}: {source}")]
    Database {
        /// Its URL.
        url: String,
        /// What failed.
        source: sea_orm::DbErr,
    },
    /// The outbox worker refused to start.
    #[error(transparent)]
    Worker(#[from] outbox_axum::WorkerError),
    /// A region this example has no id code for (`crate::ids::REGION_CODES`).
    #[error("unknown region {0:?}: this example knows {known}", known = crate::ids::REGION_CODES.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", "))]
    UnknownRegion(String),
    /// The server failed.
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
}

/// A silo running in this process.
pub struct RunningSilo {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its database.
    pub db: DatabaseConnection,
    /// Its drainer (inspection, tests).
    pub drainer: Drainer<OutboxCategory>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), std::io::Error>>,
}

impl std::fmt::Debug for RunningSilo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningSilo")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl RunningSilo {
    /// Stops serving (graceful), then stops the outbox worker.
    ///
    /// # Errors
    ///
    /// The server's error.
    pub async fn shutdown(self) -> Result<(), std::io::Error> {
        let _ = self.stop.send(());
        self.task.await.unwrap_or(Ok(()))
    }
}

/// Opens a database, creating the SQLite file's folder if needed.
///
/// # Errors
///
/// [`SiloError::Database`].
pub async fn open_database(url: &str) -> Result<DatabaseConnection, SiloError> {
    if let Some(path) = url.strip_prefix("sqlite://") {
        let path = path.split('?').next().unwrap_or(path);
        if let Some(parent) = std::path::Path::new(path).parent() {
            let _ = std::fs::create_dir_all(parent);
        }
    }
    let mut options = ConnectOptions::new(url.to_owned());
    options.max_connections(10).sqlx_logging(false);
    let db = Database::connect(options)
        .await
        .map_err(|source| SiloError::Database {
            url: url.to_owned(),
            source,
        })?;
    if db.get_database_backend() == DbBackend::Sqlite {
        use sea_orm::ConnectionTrait;
        db.execute_unprepared("PRAGMA journal_mode=WAL")
            .await
            .map_err(|source| SiloError::Database {
                url: url.to_owned(),
                source,
            })?;
    }
    Ok(db)
}

/// Migrates, starts the worker and serves on `listener` until shut down.
///
/// # Errors
///
/// [`SiloError`] when the database or the worker cannot start.
pub async fn start(config: SiloConfig, listener: TcpListener) -> Result<RunningSilo, SiloError> {
    // Before the worker emits its first metrics.
    crate::telemetry::prometheus();
    let db = open_database(&config.database_url).await?;
    let migrated = match &config.role {
        Role::Control => ControlMigrator::up(&db, None).await,
        Role::Region(_) => RegionMigrator::up(&db, None).await,
    };
    migrated.map_err(|source| SiloError::Database {
        url: config.database_url.clone(),
        source,
    })?;

    let (receivers, routes) = match &config.role {
        Role::Control => {
            let regions = config
                .region_urls
                .iter()
                .map(|(name, url)| {
                    (
                        name.clone(),
                        RpcClient::new(url.clone(), config.secret.clone()),
                    )
                })
                .collect();
            let context = Arc::new(ControlContext { regions });
            (
                control::receivers(&db, context),
                control::routes(control::handlers_state(db.clone()), config.secret.clone()),
            )
        }
        Role::Region(name) => {
            let code = crate::ids::region_code(name)
                .ok_or_else(|| SiloError::UnknownRegion(name.clone()))?;
            let context = Arc::new(RegionContext {
                region: name.clone(),
                control: RpcClient::new(config.control_url.clone(), config.secret.clone()),
            });
            (
                region::receivers(&db, context),
                region::routes(
                    region::handlers_state(name.clone(), code, db.clone()),
                    config.secret.clone(),
                ),
            )
        }
    };
    let backfill = Arc::new(backfill_for(&config.role));
    let mut worker = OutboxWorker::builder(db.clone(), receivers)
        .poll_interval(config.poll_interval)
        .backfill(backfill_for(&config.role));
    if let Some(url) = &config.listen_url {
        worker = worker.listen_url(url);
    }
    let worker = worker.spawn()?;
    let drainer = worker.drainer().clone();
    let app = routes
        .layer(worker.layer())
        .merge(admin_routes(
            AdminState {
                drainer: drainer.clone(),
                waker: worker.waker().clone(),
                backfill,
                db: db.clone(),
            },
            config.secret.clone(),
        ))
        .layer(axum::extract::DefaultBodyLimit::max(config.body_limit))
        .layer(RequestBodyTimeoutLayer::new(config.body_timeout));
    let addr = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await;
        worker.shutdown().await;
        served
    });
    tracing::info!(role = ?config.role, %addr, "silo started");
    Ok(RunningSilo {
        addr,
        db,
        drainer,
        stop,
        task,
    })
}

/// The replicated models of a silo, in backfill order (option-gated: a
/// table advances once `outbox_replication.<table>.replication_version` is
/// set; `example-app upgrade` forces them).
pub fn backfill_for(role: &Role) -> Backfill {
    match role {
        Role::Control => Backfill::new().model::<crate::control::entities::users::Model>(),
        Role::Region(_) => Backfill::new()
            .model::<crate::region::entities::organization::Model>()
            .model::<crate::region::entities::organization_member::Model>(),
    }
}

#[derive(Clone)]
struct AdminState {
    drainer: Drainer<OutboxCategory>,
    waker: outbox_core::worker::Waker,
    backfill: Arc<Backfill>,
    db: DatabaseConnection,
}

/// `/healthz`, `/metrics`, `/admin/outbox/shards`, `/admin/outbox/failing`,
/// `/admin/outbox/backfills`, and (with the silo secret)
/// `POST /admin/outbox/retry`.
fn admin_routes(state: AdminState, secret: String) -> Router {
    let retry = Router::new()
        .route("/admin/outbox/retry", post(retry_shards))
        .route_layer(axum::middleware::from_fn_with_state(
            secret,
            crate::rpc::require_secret,
        ));
    Router::new()
        .route(
            "/healthz",
            get(|| async { Json(serde_json::json!({ "status": "ok" })) }),
        )
        .route("/metrics", get(crate::telemetry::metrics))
        .route("/admin/outbox/shards", get(pending_shards))
        .route("/admin/outbox/failing", get(failing_shards))
        .route("/admin/outbox/backfills", get(backfills))
        .merge(retry)
        .with_state(state)
}

fn store_unavailable(error: outbox_core::StoreError) -> ApiError {
    tracing::error!(%error, "outbox admin");
    ApiError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "outbox store unavailable",
    )
}

/// A shard, as the admin routes show and take it.
#[derive(Debug, serde::Deserialize, serde::Serialize)]
struct ShardRef {
    /// `region` or `control`.
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    region: Option<String>,
    scope: i32,
    shard_identifier: i64,
}

impl crate::validate::Validate for ShardRef {
    fn validate(&self) -> Result<(), ApiError> {
        crate::validate::text("kind", &self.kind, 16)?;
        if let Some(region) = &self.region {
            crate::validate::text("region", region, crate::validate::SLUG_MAX)?;
        }
        Ok(())
    }
}

impl ShardRef {
    fn of(shard: &outbox_core::ShardKey) -> Self {
        Self {
            kind: shard.kind().as_str().to_owned(),
            region: shard.region_name().map(str::to_owned),
            scope: shard.scope(),
            shard_identifier: shard.identifier(),
        }
    }

    fn key(&self) -> Result<outbox_core::ShardKey, ApiError> {
        let kind = OutboxKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == self.kind)
            .ok_or_else(|| ApiError::bad_request("kind is `region` or `control`"))?;
        match (kind, &self.region) {
            (OutboxKind::Control, None) => Err(ApiError::bad_request(
                "a control-outbox shard needs its region",
            )),
            (OutboxKind::Region, Some(_)) => {
                Err(ApiError::bad_request("a region-outbox shard has no region"))
            }
            _ => Ok(outbox_core::ShardKey::from_raw(
                kind,
                self.scope,
                self.shard_identifier,
                self.region.clone(),
            )),
        }
    }
}

/// Shards that failed and have not succeeded since, both outboxes: attempts,
/// last error, next attempt, and whether the shard is quarantined after a
/// permanent error (it then waits for `POST /admin/outbox/retry`).
async fn failing_shards(
    State(AdminState { drainer, .. }): State<AdminState>,
) -> Result<Json<Vec<serde_json::Value>>, ApiError> {
    let mut failing = Vec::new();
    for kind in OutboxKind::ALL {
        failing.extend(
            drainer
                .admin()
                .failing_shards(kind, 100)
                .await
                .map_err(store_unavailable)?,
        );
    }
    Ok(Json(
        failing
            .into_iter()
            .map(|failing| {
                let state = &failing.state;
                serde_json::json!({
                    "shard": ShardRef::of(&failing.shard),
                    "quarantined": state.is_quarantined(),
                    "attempts": state.attempts,
                    "last_error": state.last_error,
                    "failed_at": state.failed_at.to_rfc3339(),
                    "retry_at": (!state.is_quarantined()).then(|| state.retry_at.to_rfc3339()),
                })
            })
            .collect(),
    ))
}

/// Makes the given shards due at once (a quarantine or a backoff ends), for
/// after a fix. Answers the shards released. A worker may hold a shard's
/// bucket for a moment (it finds a quarantined shard, leaves it, releases):
/// those are asked for again for up to a second; a shard still held then is
/// not in the answer, and can be asked for again.
async fn retry_shards(
    State(AdminState { drainer, waker, .. }): State<AdminState>,
    crate::error::ApiJson(shards): crate::error::ApiJson<Vec<ShardRef>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let keys = shards
        .iter()
        .map(ShardRef::key)
        .collect::<Result<Vec<_>, _>>()?;
    let mut released = Vec::new();
    let mut left = keys.clone();
    for _ in 0..20 {
        let now_released = drainer
            .admin()
            .retry_now(&left, drainer.now())
            .await
            .map_err(store_unavailable)?;
        left.retain(|shard| !now_released.contains(shard));
        released.extend(now_released);
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    tracing::info!(
        released = released.len(),
        asked = keys.len(),
        "outbox shards retried by an operator"
    );
    for kind in OutboxKind::ALL {
        waker.wake_local(kind);
    }
    Ok(Json(serde_json::json!({
        "released": released.iter().map(ShardRef::of).collect::<Vec<_>>(),
    })))
}

/// Per replicated table: the backfill cursor, target version and rows left.
async fn backfills(
    State(state): State<AdminState>,
) -> Result<Json<Vec<serde_json::Value>>, ApiError> {
    let statuses = state.backfill.status(&state.db).await?;
    Ok(Json(
        statuses
            .into_iter()
            .map(|status| {
                serde_json::json!({
                    "table": status.table,
                    "lower_bound_id": status.lower_bound_id,
                    "cursor_version": status.cursor_version,
                    "coded_version": status.coded_version,
                    "target_version": status.target_version,
                    "done": status.done,
                    "rows_remaining": status.rows_remaining,
                })
            })
            .collect(),
    ))
}

/// Pending shards of both outboxes, deepest first, with their depth, oldest
/// age and next scheduled time.
async fn pending_shards(
    State(AdminState { drainer, .. }): State<AdminState>,
) -> Result<Json<Vec<serde_json::Value>>, ApiError> {
    let now = drainer.now();
    let mut shards = Vec::new();
    for kind in OutboxKind::ALL {
        let depths = drainer
            .admin()
            .shard_depths(kind, 100)
            .await
            .map_err(|error| {
                tracing::error!(%error, "shard depths");
                ApiError::new(
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    "outbox store unavailable",
                )
            })?;
        shards.extend(depths);
    }
    shards.sort_by_key(|shard| std::cmp::Reverse(shard.depth));
    Ok(Json(
        shards
            .into_iter()
            .map(|shard| {
                serde_json::json!({
                    "kind": shard.shard.kind().as_str(),
                    "region": shard.shard.region_name(),
                    "scope": shard.shard.scope(),
                    "shard_identifier": shard.shard.identifier(),
                    "depth": shard.depth,
                    "oldest_age_seconds": (now - shard.oldest_date_added).num_milliseconds() as f64 / 1000.0,
                    "next_scheduled_for": shard.next_scheduled_for.to_rfc3339(),
                })
            })
            .collect(),
    ))
}
