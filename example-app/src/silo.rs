//! Starting one silo: database, migrations, outbox worker, HTTP server.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderName, StatusCode};
use axum::routing::get;
use axum::{Json, Router};
use outbox_axum::admin::{Admin, BearerToken};
use outbox_axum::OutboxWorker;
use outbox_core::{Drainer, Receivers};
use outbox_seaorm::backfill::Backfill;
use outbox_seaorm::cli::OutboxCli;
use outbox_seaorm::SeaOrmStore;
use sea_orm::{Database, DatabaseConnection, DbErr};
use sea_orm_migration::MigratorTrait;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::ServiceBuilder;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};
use tower_http::trace::TraceLayer;

use crate::api_auth::{ApiAuth, ApiTokens};
use crate::control::{self, ControlContext};
use crate::limits::{Limits, WriteLimit};
use crate::migrations::{ControlMigrator, RegionMigrator};
use crate::region::{self, RegionContext};
use crate::registry::OutboxCategory;
use crate::rpc::{Peers, RpcClient, RpcKeys};

/// Which silo to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// The control silo.
    Control,
    /// A region silo, by name.
    Region(String),
}

/// How to run one silo. Its `Debug` shows neither the RPC keys nor the
/// admin token, and masks the database URLs' passwords.
#[derive(Clone)]
pub struct SiloConfig {
    /// Control or a region.
    pub role: Role,
    /// Its database (`sqlite://path?mode=rwc` or `postgres://...`).
    pub database_url: String,
    /// Where its outbox worker `LISTEN`s on PostgreSQL, if not through the
    /// database URL (which may go through a transaction-pooling proxy).
    pub listen_url: Option<String>,
    /// The RPC keys, by silo name (`control`, `us`, `de`): `whsec_` and 32
    /// or more random bytes in base64, or two separated by a comma during
    /// a rotation (`rpc::keys`). A silo needs its own and its peers' (Control
    /// every region's, a region Control's); others are ignored.
    pub rpc_keys: BTreeMap<String, String>,
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
    /// The bearer token of the outbox admin API (`/admin/outbox`); `None`
    /// leaves it off.
    pub admin_token: Option<String>,
    /// A second admin token that may only read (the admin API's viewer
    /// role: on-call, support); needs `admin_token`.
    pub viewer_token: Option<String>,
    /// Whether `/metrics` answers without a token. Default `false`: with
    /// an admin token, a scrape needs it or the viewer's
    /// (`Authorization: Bearer …`; Prometheus' `authorization` setting).
    pub public_metrics: bool,
    /// Header-read timeout, connection limit, request timeout and rate of
    /// public writes (`crate::limits`).
    pub limits: Limits,
    /// The key of the public API's user tokens (`crate::api_auth`), the same
    /// for every silo: `whsec_` and 32 or more bytes in base64, or two
    /// separated by a comma during a rotation.
    pub api_token_key: String,
}

impl std::fmt::Debug for SiloConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secret = |set: bool| if set { "<redacted>" } else { "<none>" };
        f.debug_struct("SiloConfig")
            .field("role", &self.role)
            .field("database_url", &redacted(&self.database_url))
            .field("listen_url", &self.listen_url.as_deref().map(redacted))
            .field(
                "rpc_keys",
                &self
                    .rpc_keys
                    .keys()
                    .map(|silo| (silo.as_str(), "<redacted>"))
                    .collect::<BTreeMap<_, _>>(),
            )
            .field("control_url", &self.control_url)
            .field("region_urls", &self.region_urls)
            .field("poll_interval", &self.poll_interval)
            .field("body_timeout", &self.body_timeout)
            .field("body_limit", &self.body_limit)
            .field("admin_token", &secret(self.admin_token.is_some()))
            .field("viewer_token", &secret(self.viewer_token.is_some()))
            .field("public_metrics", &self.public_metrics)
            .field("limits", &self.limits)
            .field("api_token_key", &"<redacted>")
            .finish()
    }
}

impl SiloConfig {
    /// This silo's name in the RPC keys (`control`, or the region's).
    pub fn silo_name(&self) -> &str {
        match &self.role {
            Role::Control => crate::rpc::CONTROL,
            Role::Region(name) => name,
        }
    }

    /// The keys this silo signs with and verifies its callers with: its
    /// own, and Control's (a region) or every region's of `region_urls`
    /// (Control).
    ///
    /// # Errors
    ///
    /// [`SiloError::RpcKey`] for a key missing, malformed or shorter than
    /// [`crate::rpc::MIN_KEY_LEN`] bytes.
    pub fn keys(&self) -> Result<RpcKeys, SiloError> {
        let peers: Vec<&str> = match &self.role {
            Role::Control => self.region_urls.keys().map(String::as_str).collect(),
            Role::Region(_) => vec![crate::rpc::CONTROL],
        };
        Ok(RpcKeys::for_silo(self.silo_name(), peers, &self.rpc_keys)?)
    }

    /// The public API's token keys.
    ///
    /// # Errors
    ///
    /// [`SiloError::RpcKey`] for a key missing, malformed or too short.
    pub fn api_tokens(&self) -> Result<ApiTokens, SiloError> {
        let keys = crate::rpc::keys::parse_keys(crate::rpc::keys::API_TOKENS, &self.api_token_key)?;
        Ok(ApiTokens::new(keys))
    }
}

/// Default [`SiloConfig::body_limit`]: 1 MiB (a bulk creation of
/// `validate::BULK_MAX` organizations fits).
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

/// `url` with the password of its user info, if any, masked: an error
/// message must not print a secret (`postgres://app:***@db/app`).
pub fn redacted(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let authority_start = scheme_end + 3;
    let authority_end = url[authority_start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |at| authority_start + at);
    let authority = &url[authority_start..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let Some(colon) = authority[..at].find(':') else {
        return url.to_owned();
    };
    format!(
        "{}{}:***{}",
        &url[..authority_start],
        &authority[..colon],
        &url[authority_start + at..]
    )
}

/// Why a silo did not start.
#[derive(Debug, thiserror::Error)]
pub enum SiloError {
    /// The database could not be opened or migrated.
    #[error("database {}: {source}", redacted(url))]
    Database {
        /// Its URL (shown with its password masked).
        url: String,
        /// What failed.
        source: sea_orm::DbErr,
    },
    /// The outbox worker refused to start.
    #[error(transparent)]
    Worker(#[from] outbox_axum::WorkerError),
    /// An RPC key is missing, malformed or too short.
    #[error(transparent)]
    RpcKey(#[from] crate::rpc::KeyError),
    /// The admin or viewer token cannot be used (too short, or the same).
    #[error("the admin tokens (--admin-token, --viewer-token): {0}")]
    AdminToken(#[from] outbox_axum::admin::TokenError),
    /// A viewer token was given without an admin token.
    #[error("--viewer-token needs --admin-token: the admin API is off without it")]
    ViewerWithoutAdmin,
    /// A region this example has no id code for (`crate::ids::REGION_CODES`).
    #[error("unknown region {0:?}: this example knows {known}", known = crate::ids::REGION_CODES.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", "))]
    UnknownRegion(String),
    /// The database lacks migrations.
    #[error(
        "database {url} lacks {pending} migrations: start the silo once, or run \
         `example-app --silo <silo> upgrade`, before the outbox commands"
    )]
    NotMigrated {
        /// Its URL.
        url: String,
        /// Migrations not applied.
        pending: usize,
    },
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
    // PostgreSQL or SQLite (WAL, busy timeout and foreign keys on every
    // pooled connection), by the URL's scheme.
    let failed = |source| SiloError::Database {
        url: url.to_owned(),
        source,
    };
    let mut options = outbox_seaorm::connect_options(url).map_err(|error| {
        failed(DbErr::Conn(sea_orm::RuntimeErr::Internal(
            error.to_string(),
        )))
    })?;
    options.max_connections(10);
    Database::connect(options).await.map_err(failed)
}

/// Migrates, starts the worker and serves on `listener` until shut down.
///
/// # Errors
///
/// [`SiloError`] when the database or the worker cannot start.
pub async fn start(config: SiloConfig, listener: TcpListener) -> Result<RunningSilo, SiloError> {
    // Before anything is opened.
    let keys = config.keys()?;
    let api = ApiAuth {
        tokens: config.api_tokens()?,
        admin_token: config.admin_token.clone(),
    };
    let admin = match (&config.admin_token, &config.viewer_token) {
        (Some(token), viewer) => {
            let admin = BearerToken::new(token.as_str())?;
            Some(match viewer {
                Some(viewer) => admin.viewer("viewer", viewer.as_str())?,
                None => admin,
            })
        }
        (None, Some(_)) => return Err(SiloError::ViewerWithoutAdmin),
        (None, None) => None,
    };
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

    let write_limit = WriteLimit::new(config.limits.write_rate);
    let (receivers, routes) = receivers_and_routes(&config, &keys, &api.tokens, &write_limit, &db)?;
    let backfill = Arc::new(backfill_for(&config.role));
    let mut worker = OutboxWorker::builder(db.clone(), receivers)
        .poll_interval(config.poll_interval)
        .backfill(backfill_for(&config.role))
        // The RPC routes record the message ids they apply (`rpc::apply_once`).
        .inbox_retention(outbox_seaorm::inbox::DEFAULT_RETENTION);
    if let Some(url) = &config.listen_url {
        worker = worker.listen_url(url);
    }
    let worker = worker.spawn().await?;
    let drainer = worker.drainer().clone();
    let app = routes
        .layer(worker.layer())
        // Outside the outbox layer: a request without credentials is
        // refused before anything else runs.
        .layer(axum::middleware::from_fn_with_state(
            api,
            crate::api_auth::require_token,
        ))
        .merge(admin_routes(
            backfill,
            db.clone(),
            drainer.clone(),
            worker.waker().clone(),
            admin,
            config.public_metrics,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(config.body_limit))
        .layer(RequestBodyTimeoutLayer::new(config.body_timeout))
        // Outside the outbox layer: a request cut short rolls back.
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            config.limits.request_timeout,
        ));
    let app = traced(app);
    let addr = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let limits = config.limits.clone();
    let task = tokio::spawn(async move {
        let forget = async {
            let mut every = tokio::time::interval(Duration::from_secs(60));
            loop {
                every.tick().await;
                write_limit.forget_idle_clients();
            }
        };
        let served = tokio::select! {
            served = crate::serve::serve(listener, app, &limits, async {
                let _ = stopped.await;
            }) => served,
            never = forget => never,
        };
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

/// The outbox receivers and the HTTP routes of a silo: Control's call the
/// regions, a region's call Control (over RPC, signed with this silo's key;
/// the RPC routes accept calls signed with the peers' keys).
fn receivers_and_routes(
    config: &SiloConfig,
    keys: &RpcKeys,
    tokens: &ApiTokens,
    write_limit: &WriteLimit,
    db: &DatabaseConnection,
) -> Result<(Receivers<OutboxCategory>, Router), SiloError> {
    let peers = Peers::new(config.silo_name(), keys.peers.clone());
    Ok(match &config.role {
        Role::Control => {
            let regions = config
                .region_urls
                .iter()
                .map(|(name, url)| {
                    (
                        name.clone(),
                        RpcClient::new(name.clone(), url.clone(), keys.own.clone())
                            .from_silo(crate::rpc::CONTROL),
                    )
                })
                .collect();
            let context = Arc::new(ControlContext { regions });
            (
                control::receivers(db, context),
                control::routes(
                    control::handlers_state(db.clone(), tokens.clone()),
                    peers,
                    write_limit,
                ),
            )
        }
        Role::Region(name) => {
            let code = crate::ids::region_code(name)
                .ok_or_else(|| SiloError::UnknownRegion(name.clone()))?;
            let context = Arc::new(RegionContext {
                region: name.clone(),
                control: RpcClient::new(
                    crate::rpc::CONTROL,
                    config.control_url.clone(),
                    keys.own.clone(),
                )
                .from_silo(name.clone()),
            });
            (
                region::receivers(db, context),
                region::routes(
                    region::handlers_state(name.clone(), code, db.clone()),
                    peers,
                    write_limit,
                ),
            )
        }
    })
}

/// The outbox commands (`example-app --silo us outbox ...`) over one silo's
/// database, without serving it: its drainer (the receivers of the silo,
/// so `drain` delivers through RPC as the silo would) and its backfill.
///
/// # Errors
///
/// [`SiloError::Database`] when the database cannot be opened;
/// [`SiloError::NotMigrated`] when it lacks migrations (the commands read
/// the outbox tables, and migrating is the silo's own business).
pub async fn outbox_cli(config: &SiloConfig) -> Result<OutboxCli<OutboxCategory>, SiloError> {
    let db = open_database(&config.database_url).await?;
    let pending = match &config.role {
        Role::Control => ControlMigrator::get_pending_migrations(&db).await,
        Role::Region(_) => RegionMigrator::get_pending_migrations(&db).await,
    }
    .map_err(|source| SiloError::Database {
        url: config.database_url.clone(),
        source,
    })?;
    if !pending.is_empty() {
        return Err(SiloError::NotMigrated {
            url: config.database_url.clone(),
            pending: pending.len(),
        });
    }
    let keys = config.keys()?;
    // The routes are not served: tokens made up for the occasion do.
    let tokens = ApiTokens::new(outbox_core::sink::webhook::WebhookKeys::new(
        outbox_core::sink::webhook::WebhookSecret::generate(),
    ));
    let (receivers, _) = receivers_and_routes(config, &keys, &tokens, &WriteLimit::default(), &db)?;
    let store = SeaOrmStore::new(db.clone()).map_err(outbox_axum::WorkerError::from)?;
    let drainer = Drainer::new(store, receivers);
    Ok(OutboxCli::new(drainer).with_backfill(backfill_for(&config.role), db))
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

/// `/healthz`, `/metrics`, and with `admin_token` the library's admin API
/// and dashboard under `/admin/outbox` (see `outbox_axum::admin`), with the
/// silo's backfills.
fn admin_routes(
    backfill: Arc<Backfill>,
    db: DatabaseConnection,
    drainer: Drainer<OutboxCategory>,
    waker: outbox_core::worker::Waker,
    admin: Option<BearerToken>,
    public_metrics: bool,
) -> Router {
    let mut router = Router::new().route(
        "/healthz",
        get(|| async { Json(serde_json::json!({ "status": "ok" })) }),
    );
    let metrics = Router::new().route("/metrics", get(crate::telemetry::metrics));
    match admin {
        Some(tokens) => {
            let admin = Admin::new(drainer)
                .asyncapi_info(
                    outbox_core::asyncapi::Info::new(
                        "example-app outbox messages",
                        env!("CARGO_PKG_VERSION"),
                    )
                    .with_description("What the example's silos send each other."),
                )
                .waker(waker)
                .backfill(backfill, db.clone())
                // The RPC routes' fenced inbox lives in this silo's database.
                .inbox(db);
            // Behind the admin's tokens and its throttle: a wrong token at
            // `/metrics` counts against the client as on the admin routes.
            // At the silo's root rather than the router's own
            // (`Admin::metrics`, under `/admin/outbox`): the path the ops
            // checks scrape, public with `--public-metrics`, and 503 when
            // another recorder holds the process.
            let metrics = if public_metrics {
                metrics
            } else {
                metrics.route_layer(admin.require_principal(tokens.clone()))
            };
            router = router
                .merge(metrics)
                .nest("/admin/outbox", admin.router(tokens));
        }
        None => {
            tracing::info!("no admin token: the outbox admin API is off");
            router = router.merge(metrics);
        }
    }
    router
}

/// Every request gets an `x-request-id` (a UUID, unless the client sent
/// one), answered back, and a `request` span carrying it, method and path:
/// what the request logs, and the outbox rows it writes, are found by it.
fn traced(router: Router) -> Router {
    let request_id = HeaderName::from_static(REQUEST_ID);
    router.layer(
        ServiceBuilder::new()
            .layer(SetRequestIdLayer::new(request_id.clone(), MakeRequestUuid))
            .layer(
                TraceLayer::new_for_http().make_span_with(|request: &axum::http::Request<_>| {
                    let id = request
                        .headers()
                        .get(REQUEST_ID)
                        .and_then(|id| id.to_str().ok())
                        .unwrap_or_default();
                    tracing::info_span!(
                        "request",
                        method = %request.method(),
                        path = %request.uri().path(),
                        request_id = %id,
                    )
                }),
            )
            .layer(PropagateRequestIdLayer::new(request_id)),
    )
}

/// The request-id header.
pub const REQUEST_ID: &str = "x-request-id";

#[cfg(test)]
mod tests {
    use super::*;

    /// Refused before anything is opened: no database file is made.
    #[tokio::test]
    async fn a_silo_with_a_weak_or_missing_key_does_not_start() {
        let dir = std::env::temp_dir().join(format!("outbox-weak-secret-{}", std::process::id()));
        let path = dir.join("control.sqlite");
        let config = SiloConfig {
            role: Role::Control,
            database_url: format!("sqlite://{}?mode=rwc", path.display()),
            listen_url: None,
            rpc_keys: BTreeMap::from([(
                "control".to_owned(),
                "whsec_bm90LWxvbmctZW5vdWdo".to_owned(),
            )]),
            control_url: "http://127.0.0.1:1".into(),
            region_urls: BTreeMap::new(),
            poll_interval: Duration::from_secs(1),
            body_timeout: Duration::from_secs(10),
            body_limit: DEFAULT_BODY_LIMIT,
            admin_token: None,
            viewer_token: None,
            public_metrics: false,
            limits: Limits::default(),
            api_token_key: crate::rpc::keys::generate(),
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let error = start(config.clone(), listener).await.err().unwrap();
        assert!(
            matches!(
                error,
                SiloError::RpcKey(crate::rpc::KeyError::Weak { length: 15, .. })
            ),
            "{error}"
        );
        assert!(!error.to_string().contains("bm90LWxvbmctZW5vdWdo"));
        // Control needs the key of every region it calls.
        let mut config = config;
        config
            .rpc_keys
            .insert("control".into(), crate::rpc::keys::generate());
        config
            .region_urls
            .insert("us".into(), "http://127.0.0.1:1".into());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let error = start(config, listener).await.err().unwrap();
        assert!(
            matches!(&error, SiloError::RpcKey(crate::rpc::KeyError::Missing { silo }) if silo == "us"),
            "{error}"
        );
        assert!(!path.exists());
    }

    #[test]
    fn a_configs_debug_shows_no_secret_token_or_password() {
        let config = SiloConfig {
            role: Role::Control,
            database_url: "postgres://app:db-pa55@127.0.0.1/control".into(),
            listen_url: Some("postgres://app:db-pa55@127.0.0.1:5433/control".into()),
            rpc_keys: BTreeMap::from([(
                "control".to_owned(),
                "whsec_cnBjLXMzY3JldC1ycGMtczNjcmV0LXJwYy1zM2NyZXQ=".to_owned(),
            )]),
            control_url: "http://127.0.0.1:8000".into(),
            region_urls: BTreeMap::new(),
            poll_interval: Duration::from_secs(1),
            body_timeout: Duration::from_secs(10),
            body_limit: DEFAULT_BODY_LIMIT,
            admin_token: Some("admin-t0ken".into()),
            viewer_token: Some("v1ewer-t0ken".into()),
            public_metrics: false,
            limits: Limits::default(),
            api_token_key: "whsec_YXBpLXRva2VuLWtleS1hcGktdG9rZW4ta2V5LWFwaS0=".into(),
        };
        let shown = format!("{config:?}");
        for secret in [
            "db-pa55",
            "cnBjLXMzY3JldC1ycGMtczNjcmV0LXJwYy1zM2NyZXQ",
            "admin-t0ken",
            "YXBpLXRva2VuLWtleS1hcGktdG9rZW4ta2V5LWFwaS0",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(
            shown.contains("postgres://app:***@127.0.0.1/control"),
            "{shown}"
        );
    }

    #[test]
    fn a_database_error_masks_the_password_of_its_url() {
        assert_eq!(
            redacted("postgres://app:s3cret@db:5432/app?sslmode=disable"),
            "postgres://app:***@db:5432/app?sslmode=disable"
        );
        assert_eq!(redacted("postgres://app@db/app"), "postgres://app@db/app");
        assert_eq!(
            redacted("sqlite://data/us.sqlite?mode=rwc"),
            "sqlite://data/us.sqlite?mode=rwc"
        );
        assert_eq!(redacted("not a url"), "not a url");
        let error = SiloError::Database {
            url: "postgresql://u:p%40ss@h/d".to_owned(),
            source: sea_orm::DbErr::Custom("refused".to_owned()),
        };
        let text = error.to_string();
        assert!(
            !text.contains("p%40ss") && text.contains("u:***@h/d"),
            "{text}"
        );
    }
}
