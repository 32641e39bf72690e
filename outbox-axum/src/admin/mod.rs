//! The operator's admin API, as a router to mount wherever you like.
//!
//! It cannot be built without an authoriser: [`Admin::router`] takes an
//! [`Authorize`] ([`BearerToken`], or any `Fn(&Parts) -> Option<Principal>`),
//! and [`Admin::router_behind`] a tower layer of your own that
//! authenticates. A refused request gets `401` and changes nothing. Each
//! caller is a [`Principal`]: a name and a [`Role`]; a
//! [viewer](Role::Viewer) reads everything and every change it asks for is
//! refused with `403` (and recorded). Every change, and every refusal, is
//! recorded in the operators' audit log ([`outbox_core::audit`]: who, when,
//! what, on what, the reason given, how it ended), listed by `GET /audit`,
//! the dashboard and the CLI. Every answer is JSON; errors are
//! `{"error": {"code": ..., "message": ...}}` with a status that says what
//! happened ([`AdminError`]), and an `"id"` naming the server's log line
//! when the store failed (the database's text is never in the answer).
//!
//! | route | what |
//! |---|---|
//! | `GET /health` | per table: depth, oldest age, failing, quarantined and paused shards, dead tuples, the oldest open transaction's age and what holds vacuum back (`horizon`: its `holder`, a session, prepared transaction or replication slot, with pid, name, state, and the statement that ends it) (PostgreSQL); each scope's depth; controls in force |
//! | `GET /shards?kind=region&limit=100` | one snapshot (one transaction): pending rows, dead letters, the deepest shards (with their failure state), the failing shards (attempts, next attempt, last error and when, paused, quarantined) |
//! | `POST /shards/retry` `{"shards": [...]}` | makes failing, paused or quarantined shards due at once |
//! | `GET /shards/head?kind=region&scope=0&identifier=65` | a shard's head message: id, category, object, payload size, the ids delivered with it, attempts and last error |
//! | `POST /shards/set-aside` `{"shard": {...}, "reason": "..."}` | moves that head message (its coalescing group) to the dead letters, whatever the scope's policy, so that the rest of the shard flows at once (`409 shard_held` while a worker delivers it); a replay brings it back |
//! | `GET /controls` | runtime controls (see [`outbox_core::control`]) |
//! | `PUT /controls` `{"target": {...}, "action": "pause"\|"cull", "reason": "..."}` | sets one, for every process within a second |
//! | `DELETE /controls` `{"target": {...}}` | lifts one; paused shards are due at once |
//! | `GET /dead-letters?kind=region&limit=100` | dead letters with payload and error |
//! | `POST /dead-letters/replay` `{"kind": "region", "ids": [...]}` | puts them back in the outbox |
//! | `POST /dead-letters/discard` `{"kind": "region", "ids": [...]}` | deletes them for good |
//! | `GET /backfills` | per replicated table: coded, target and cursor versions, cursor, rows left, done (with [`Admin::backfill`]; `404 no_backfill` without) |
//! | `GET /history?kind=region&minutes=60` | the table's history, one point per sampling time (every worker's samples merged): rows pending, oldest age, deliveries, failures, dead letters (see [`outbox_core::history`]) |
//! | `GET /audit?limit=100` | the operators' audit log, newest first: who (name, role), when, what, target, reason, outcome, detail |
//! | `GET /fences?limit=100` | the fenced receivers' records (consumer, sender, shard, highest token applied, deliveries refused as superseded and when the last was), most refusals first, and their total (with [`Admin::inbox`]; `404 no_inbox` without) |
//! | `GET /metrics` | every metric, in Prometheus's text format (`text/plain; version=0.0.4`), as your exporter renders it (with [`Admin::metrics`]; `404 no_metrics` without); a viewer may scrape it |
//! | `GET /openapi.json` | this API as an OpenAPI 3.1 document (generated from the same serde types) |
//! | `GET /asyncapi.json` | the messages the outbox sends, as an AsyncAPI 3.0 document generated from the registry: a channel per scope and category, each typed category's payload schema per version (see [`outbox_core::asyncapi`]; title and version from [`Admin::asyncapi_info`]) |
//! | `GET /dashboard?kind=region` | the same as a page, with forms: see below |
//!
//! # The dashboard
//!
//! `GET /dashboard` is server-rendered HTML (no JavaScript needed): the
//! health of both tables, the failing shards first with their last error
//! (retry, pause), the deepest shards with their lag, pause or cull per
//! scope, the controls in force (lift), the dead letters with their payload
//! and error (replay, discard, one by one or selected), and the backfills.
//! Each button is a form posted to `/actions/...` that answers `303` back
//! to the page, saying what it did or what was wrong. A browser logs in at
//! `GET /login` with the token ([`Authorize::login`]), kept in an
//! `HttpOnly`, `SameSite=Strict` cookie scoped to the path the router is
//! nested at; forms from another origin are refused (`403`). With
//! [`router_behind`](Admin::router_behind) your layer decides who sees it.
//!
//! # Wrong credentials
//!
//! Ten wrong credentials a minute from one client (bearer tokens, session
//! cookies, the login form, a logout with a forged session;
//! [`Admin::login_throttle`]) and its next requests are refused with `429`
//! before they are checked. A client is its address, an IPv6 client its
//! /64, so the router needs the client's address: serve it with
//! `into_make_service_with_connect_info::<SocketAddr>()`, or behind a
//! reverse proxy name the header it sets
//! ([`Admin::client_address`]). Without one, every checked request is
//! refused with `500 no_client_address` (and the log says how to fix it):
//! counting every client together would let one guesser lock every
//! operator out. Routes of your own behind the same tokens (a `/metrics`
//! at your application's root rather than the router's own, see
//! [`Admin::metrics`]) share the count through
//! [`Admin::require_principal`].
//!
//! A logout ends only a session that checks (signed for a known principal,
//! not expired); a forged one changes nothing and counts as a wrong
//! credential.
//!
//! Counts (pending rows, a shard's or a scope's depth, dead letters) are
//! [`outbox_core::Count`]s, `{"precision": "exact" | "at_least" |
//! "estimated", "value": n}`: exact up to the drainer's
//! [`count_cap`](outbox_core::DrainConfig::count_cap) (10,000 by default),
//! above it PostgreSQL's estimate or at least the cap, so that these reads
//! cost the same on any backlog. The dashboard writes them `12`,
//! `≥ 10,000`, `~2.4M`.
//!
//! A target is `{"kind": "region", "scope": 0, "identifier": 42}` (a shard)
//! or without `identifier` (every shard of the scope, new ones too); the
//! control outbox adds `"region": "us"`. Answers name the scope beside its
//! number (`"scope_name": "OrganizationScope"`, `null` for a scope this
//! binary does not declare), and a category likewise (`category_name`); a
//! request may send `scope_name` back as it read it, and it must then be
//! the name of `scope` (else `400`). `kind` is always the outbox table.
//! See [`model`].
//!
//! ```no_run
//! # async fn app<C: outbox_core::Category>(drainer: outbox_core::Drainer<C>) -> std::io::Result<()> {
//! use std::net::SocketAddr;
//! use outbox_axum::admin::{Admin, BearerToken};
//! let token = std::env::var("OUTBOX_ADMIN_TOKEN").expect("an admin token");
//! let admin = BearerToken::new(token).expect("a token of 32 bytes or more");
//! let app = axum::Router::new().nest("/admin/outbox", Admin::new(drainer).router(admin));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // The client's address: what wrong credentials are counted by.
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await
//! # }
//! ```

mod auth;
mod bearer;
mod dashboard;
mod error;
mod gate;
mod labels;
pub mod model;
mod openapi;
mod ops;
mod require;
mod routes;
mod session;
mod throttle;

use std::convert::Infallible;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, Route};
use axum::Router;
use sea_orm::{DatabaseConnection, DbErr};
use tower::{Layer, Service};

use outbox_seaorm::backfill::{Backfill, BackfillStatus};

use outbox_core::worker::Waker;
use outbox_core::{Category, DrainOperator, DrainView, Drainer};

pub use auth::{Authorize, Principal, Role, Session};
pub use bearer::{BearerToken, TokenError, MIN_TOKEN_LEN};
pub use error::AdminError;
pub use require::{RequirePrincipal, RequirePrincipalLayer};
pub use session::DEFAULT_SESSION_LIFETIME;
pub use throttle::{ClientAddress, DEFAULT_FAILURES, DEFAULT_WINDOW, TRACKED_CLIENTS};

/// The admin API over a drainer (its store, and its cache of controls).
#[derive(Debug)]
pub struct Admin<C: Category> {
    state: AdminState<C>,
    /// Behind TLS: `Secure`, `__Host-` session cookies.
    secure_cookies: bool,
    /// Wrong credentials per client; shared with every
    /// [`require_principal`](Admin::require_principal) layer.
    throttle: throttle::Throttle,
    client_address: ClientAddress,
}

/// What the handlers share.
#[derive(Clone)]
pub(crate) struct AdminState<C: Category> {
    /// What the routes change: controls, retries, dead letters.
    pub(crate) operator: DrainOperator,
    /// What the routes read.
    pub(crate) view: DrainView<C>,
    pub(crate) waker: Option<Waker>,
    pub(crate) backfill: Option<BackfillSource>,
    /// The database of this service's fenced receivers (`Admin::inbox`).
    pub(crate) inbox: Option<DatabaseConnection>,
    /// How long the audit log keeps a record.
    pub(crate) audit_retention: std::time::Duration,
    /// Whether the dashboard has its own login (and so a logout button).
    pub(crate) login: bool,
    /// What `GET /metrics` answers (`Admin::metrics`).
    pub(crate) metrics: Option<RenderMetrics>,
    /// The `info` of `GET /asyncapi.json` (`Admin::asyncapi_info`).
    pub(crate) asyncapi: Arc<outbox_core::asyncapi::Info>,
}

/// The exporter's rendering of every metric, in Prometheus's text format.
pub(crate) type RenderMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// The backfills the admin API reports on, and their database.
#[derive(Clone)]
pub(crate) struct BackfillSource {
    backfill: Arc<Backfill>,
    db: DatabaseConnection,
}

impl BackfillSource {
    pub(crate) async fn status(&self) -> Result<Vec<BackfillStatus>, DbErr> {
        self.backfill.status(&self.db).await
    }
}

impl<C: Category> std::fmt::Debug for AdminState<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminState").finish_non_exhaustive()
    }
}

impl<C: Category> AdminState<C> {
    /// Wakes this process's drains (shards were made due).
    pub(crate) fn wake(&self) {
        if let Some(waker) = &self.waker {
            for kind in outbox_core::OutboxKind::ALL {
                waker.wake_local(kind);
            }
        }
    }
}

impl<C: Category> Admin<C> {
    /// The admin API over `drainer` (the worker's: `WorkerHandle::drainer`).
    pub fn new(drainer: Drainer<C>) -> Self {
        Self {
            state: AdminState {
                operator: drainer.operator(),
                view: drainer.view(),
                waker: None,
                backfill: None,
                inbox: None,
                audit_retention: outbox_core::audit::DEFAULT_RETENTION,
                login: false,
                metrics: None,
                asyncapi: Arc::new(outbox_core::asyncapi::Info::new(
                    "Outbox messages",
                    "unversioned",
                )),
            },
            secure_cookies: false,
            throttle: throttle::Throttle::default(),
            client_address: ClientAddress::default(),
        }
    }

    /// Wakes this process's drains when a route makes shards due (a retry,
    /// a lifted pause), instead of leaving them to the next poll.
    pub fn waker(mut self, waker: Waker) -> Self {
        self.state.waker = Some(waker);
        self
    }

    /// Reports on `backfill` (its cursors in `db`): `GET /backfills` and the
    /// dashboard's backfill table.
    pub fn backfill(mut self, backfill: impl Into<Arc<Backfill>>, db: DatabaseConnection) -> Self {
        self.state.backfill = Some(BackfillSource {
            backfill: backfill.into(),
            db,
        });
        self
    }

    /// Reports on the fenced receivers whose records are in `db` (the
    /// receiving side's database, where `outbox_seaorm::inbox::Inbox`
    /// keeps the highest fencing token applied per sender and shard):
    /// `GET /fences` and the dashboard's table of deliveries refused as
    /// superseded, sent by workers paused past their lease (rule 12).
    pub fn inbox(mut self, db: DatabaseConnection) -> Self {
        self.state.inbox = Some(db);
        self
    }

    /// Serves `GET /metrics`: what `render` returns, answered as
    /// Prometheus's text format (`text/plain; version=0.0.4`), behind the
    /// router's authoriser and its throttle like every route; a
    /// [viewer](Role::Viewer) may scrape it. `render` is your exporter's
    /// (with `metrics-exporter-prometheus`, `move || handle.render()` on its
    /// `PrometheusHandle`), so the router needs no exporter of its own.
    /// Without it, `GET /metrics` answers `404 no_metrics`.
    ///
    /// ```no_run
    /// # fn app<C: outbox_core::Category>(drainer: outbox_core::Drainer<C>) -> axum::Router {
    /// # struct PrometheusHandle;
    /// # impl PrometheusHandle { fn render(&self) -> String { String::new() } }
    /// use outbox_axum::admin::{Admin, BearerToken};
    /// // Your exporter's handle, e.g. metrics-exporter-prometheus's
    /// // `PrometheusBuilder::new().install_recorder()?`.
    /// let handle = PrometheusHandle;
    /// let tokens = BearerToken::new(std::env::var("OUTBOX_ADMIN_TOKEN").unwrap())
    ///     .unwrap()
    ///     .viewer("prometheus", std::env::var("OUTBOX_SCRAPE_TOKEN").unwrap())
    ///     .unwrap();
    /// let admin = Admin::new(drainer).metrics(move || handle.render());
    /// // Scraped at `/admin/outbox/metrics` with the viewer's token.
    /// axum::Router::new().nest("/admin/outbox", admin.router(tokens))
    /// # }
    /// ```
    pub fn metrics(mut self, render: impl Fn() -> String + Send + Sync + 'static) -> Self {
        self.state.metrics = Some(Arc::new(render));
        self
    }

    /// The title and version (your service's) of the AsyncAPI document at
    /// `GET /asyncapi.json`. Default: "Outbox messages", "unversioned".
    pub fn asyncapi_info(mut self, info: outbox_core::asyncapi::Info) -> Self {
        self.state.asyncapi = Arc::new(info);
        self
    }

    /// How long the audit log keeps a record of an operator's action
    /// (default [`outbox_core::audit::DEFAULT_RETENTION`], 30 days); older
    /// ones are removed as new ones are written.
    pub fn audit_retention(mut self, retention: std::time::Duration) -> Self {
        self.state.audit_retention = retention;
        self
    }

    /// The dashboard's session cookie as a site behind TLS wants it:
    /// `__Host-` prefixed, `Secure`, `Path=/` (so no other path, port or
    /// subdomain of the site can set or read it over plain HTTP). Default
    /// off: an app served over plain HTTP (the example) would never get
    /// the cookie back.
    pub fn secure_cookies(mut self, secure: bool) -> Self {
        self.secure_cookies = secure;
        self
    }

    /// How many wrong credentials (bearer tokens, sessions, logins,
    /// logouts with a forged session) a client may send in `window` before
    /// its next attempts are refused with `429 too_many_attempts` without
    /// being checked (default [`DEFAULT_FAILURES`] in [`DEFAULT_WINDOW`]:
    /// 10 a minute). A client is its address, an IPv6 client its /64, found
    /// as [`client_address`](Self::client_address) says; one client's
    /// failures never refuse another. At most [`TRACKED_CLIENTS`] clients
    /// are tracked: past it, the oldest window makes room.
    pub fn login_throttle(mut self, failures: u32, window: std::time::Duration) -> Self {
        self.throttle = throttle::Throttle::new(failures, window);
        self
    }

    /// Where the client's address comes from (default
    /// [`ClientAddress::ConnectInfo`]: serve the router with
    /// `into_make_service_with_connect_info::<SocketAddr>()`; a request
    /// without it is refused with `500 no_client_address`, and the log says
    /// so). Behind a reverse proxy that every request goes through,
    /// [`ClientAddress::trusted_header`] names the header it sets.
    pub fn client_address(mut self, client_address: ClientAddress) -> Self {
        self.client_address = client_address;
        self
    }

    /// A layer for routes of your own (a `/metrics` scrape) that lets in
    /// what `authorize` lets in, any role, and counts wrong credentials
    /// against the client's allowance together with this router's.
    /// Call it before [`router`](Self::router), with the same settings.
    pub fn require_principal<A: Authorize>(&self, authorize: A) -> RequirePrincipalLayer<A> {
        RequirePrincipalLayer::new(self.gate(authorize))
    }

    fn gate<A: Authorize>(&self, authorize: A) -> gate::Gate<A> {
        gate::Gate {
            authorize,
            throttle: self.throttle.clone(),
            client_address: self.client_address.clone(),
            secure: self.secure_cookies,
        }
    }

    /// The router, every route behind `authorize`: the JSON API answers
    /// `401`, the dashboard sends a browser to its login form (which
    /// [`Authorize::login`] decides); too many wrong credentials from a
    /// client answer `429`. Every answer says not to cache or frame it.
    pub fn router<A: Authorize>(mut self, authorize: A) -> Router {
        self.state.login = true;
        let gate = self.gate(authorize);
        let (api, pages) = self.routes();
        let login = Router::new()
            .route(
                "/login",
                get(dashboard::login_form).post(dashboard::login::<A>),
            )
            .route("/logout", post(dashboard::logout::<A>))
            .with_state(gate.clone())
            .route_layer(middleware::from_fn(dashboard::same_origin));
        api.route_layer(middleware::from_fn_with_state(
            gate.clone(),
            gate::check::<A>,
        ))
        .merge(pages.route_layer(middleware::from_fn_with_state(
            gate,
            dashboard::check_page::<A>,
        )))
        .merge(login)
        .layer(middleware::from_fn(gate::headers))
    }

    /// The router behind `layer`, a tower layer of your own that
    /// authenticates (and refuses) requests. To name the caller in the
    /// audit log, and to let them only read, the layer inserts a
    /// [`Principal`] into the request's extensions; without one the caller
    /// is an operator recorded as `unnamed`.
    pub fn router_behind<L>(self, layer: L) -> Router
    where
        L: Layer<Route> + Clone + Send + Sync + 'static,
        L::Service: Service<Request> + Clone + Send + Sync + 'static,
        <L::Service as Service<Request>>::Response: IntoResponse + 'static,
        <L::Service as Service<Request>>::Error: Into<Infallible> + 'static,
        <L::Service as Service<Request>>::Future: Send + 'static,
    {
        let (api, pages) = self.routes();
        api.merge(pages)
            .route_layer(layer)
            .layer(middleware::from_fn(gate::headers))
    }

    /// The JSON API and the dashboard (with its forms and logout); a
    /// viewer's change is refused (and recorded) before it runs.
    fn routes(self) -> (Router, Router) {
        let roles = middleware::from_fn_with_state(self.state.clone(), enforce_role::<C>);
        let pages = Router::new()
            .route("/dashboard", get(dashboard::dashboard::<C>))
            .route("/actions/{action}", post(dashboard::act::<C>))
            .route_layer(roles.clone())
            .route_layer(middleware::from_fn(dashboard::same_origin))
            .with_state(self.state.clone());
        let api = Router::new()
            .route("/health", get(routes::health::<C>))
            .route("/shards", get(routes::shards::<C>))
            .route("/shards/retry", post(routes::retry::<C>))
            .route("/shards/head", get(routes::head::<C>))
            .route("/shards/set-aside", post(routes::set_aside::<C>))
            .route(
                "/controls",
                get(routes::controls::<C>)
                    .put(routes::set_control::<C>)
                    .delete(routes::lift_control::<C>),
            )
            .route("/dead-letters", get(routes::dead_letters::<C>))
            .route("/dead-letters/replay", post(routes::replay::<C>))
            .route("/dead-letters/discard", post(routes::discard::<C>))
            .route("/backfills", get(routes::backfills::<C>))
            .route("/fences", get(routes::fences::<C>))
            .route("/audit", get(routes::audit::<C>))
            .route("/history", get(routes::history::<C>))
            .route("/metrics", get(routes::metrics::<C>))
            .route("/openapi.json", get(openapi::document))
            .route("/asyncapi.json", get(routes::asyncapi::<C>))
            .route_layer(roles)
            .with_state(self.state);
        (api, pages)
    }
}

/// Refuses, with `403 forbidden`, any change asked by a principal who may
/// only read, and records the refusal in the audit log.
async fn enforce_role<C: Category>(
    State(state): State<AdminState<C>>,
    request: Request,
    next: Next,
) -> Response {
    let reads = matches!(
        *request.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    );
    let actor = match request.extensions().get::<Principal>() {
        Some(principal) if !reads && !principal.role().can_act() => principal.clone(),
        _ => return next.run(request).await,
    };
    let refused: Result<(), AdminError> = Err(AdminError::forbidden(actor.role().as_str()));
    let action = format!("{} {}", request.method(), request.uri().path());
    let audit = ops::Audit {
        actor: &actor,
        action: "refused",
        target: Some(action),
        reason: None,
    };
    ops::record(&state, audit, &refused, |()| String::new()).await;
    match refused {
        Err(error) => error.into_response(),
        Ok(()) => next.run(request).await,
    }
}
