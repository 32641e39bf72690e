//! The operator's admin API, as a router to mount wherever you like.
//!
//! It cannot be built without an authoriser: [`Admin::router`] takes an
//! [`Authorize`] ([`BearerToken`], or any `Fn(&Parts) -> bool`), and
//! [`Admin::router_behind`] a tower layer of your own that authenticates.
//! A refused request gets `401` and changes nothing. Every answer is JSON;
//! errors are `{"error": {"code": ..., "message": ...}}` with a status that
//! says what happened ([`AdminError`]).
//!
//! | route | what |
//! |---|---|
//! | `GET /health` | per table: depth, oldest age, failing, quarantined and paused shards, dead tuples and the oldest open transaction's age (PostgreSQL); controls in force |
//! | `GET /shards?kind=region&limit=100` | one snapshot (one transaction): pending rows, dead letters, the deepest shards (with their failure state), the failing shards (attempts, next attempt, last error and when, paused, quarantined) |
//! | `POST /shards/retry` `{"shards": [...]}` | makes failing, paused or quarantined shards due at once |
//! | `GET /controls` | runtime controls (see [`outbox_core::control`]) |
//! | `PUT /controls` `{"target": {...}, "action": "pause"\|"cull", "reason": "..."}` | sets one, for every process within a second |
//! | `DELETE /controls` `{"target": {...}}` | lifts one; paused shards are due at once |
//! | `GET /dead-letters?kind=region&limit=100` | dead letters with payload and error |
//! | `POST /dead-letters/replay` `{"kind": "region", "ids": [...]}` | puts them back in the outbox |
//! | `POST /dead-letters/discard` `{"kind": "region", "ids": [...]}` | deletes them for good |
//!
//! A target is `{"kind": "region", "scope": 0, "identifier": 42}` (a shard)
//! or without `identifier` (every shard of the scope, new ones too); the
//! control outbox adds `"region": "us"`.
//!
//! ```no_run
//! # fn app<C: outbox_core::Category>(drainer: outbox_core::Drainer<C>) -> axum::Router {
//! use outbox_axum::admin::{Admin, BearerToken};
//! let token = std::env::var("OUTBOX_ADMIN_TOKEN").expect("an admin token");
//! axum::Router::new().nest("/admin/outbox", Admin::new(drainer).router(BearerToken::new(token)))
//! # }
//! ```

mod auth;
mod error;
pub mod model;
mod routes;

use std::convert::Infallible;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, Route};
use axum::Router;
use tower::{Layer, Service};

use outbox_core::worker::Waker;
use outbox_core::{Category, Drainer};

pub use auth::{Authorize, BearerToken};
pub use error::AdminError;

/// The admin API over a drainer (its store, and its cache of controls).
#[derive(Debug)]
pub struct Admin<C: Category> {
    state: AdminState<C>,
}

/// What the handlers share.
#[derive(Clone)]
pub(crate) struct AdminState<C: Category> {
    pub(crate) drainer: Drainer<C>,
    pub(crate) waker: Option<Waker>,
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
                drainer,
                waker: None,
            },
        }
    }

    /// Wakes this process's drains when a route makes shards due (a retry,
    /// a lifted pause), instead of leaving them to the next poll.
    pub fn waker(mut self, waker: Waker) -> Self {
        self.state.waker = Some(waker);
        self
    }

    /// The router, every route behind `authorize`.
    pub fn router<A: Authorize>(self, authorize: A) -> Router {
        self.routes()
            .route_layer(middleware::from_fn_with_state(authorize, check::<A>))
    }

    /// The router behind `layer`, a tower layer of your own that
    /// authenticates (and refuses) requests.
    pub fn router_behind<L>(self, layer: L) -> Router
    where
        L: Layer<Route> + Clone + Send + Sync + 'static,
        L::Service: Service<Request> + Clone + Send + Sync + 'static,
        <L::Service as Service<Request>>::Response: IntoResponse + 'static,
        <L::Service as Service<Request>>::Error: Into<Infallible> + 'static,
        <L::Service as Service<Request>>::Future: Send + 'static,
    {
        self.routes().route_layer(layer)
    }

    fn routes(self) -> Router {
        Router::new()
            .route("/health", get(routes::health::<C>))
            .route("/shards", get(routes::shards::<C>))
            .route("/shards/retry", post(routes::retry::<C>))
            .route(
                "/controls",
                get(routes::controls::<C>)
                    .put(routes::set_control::<C>)
                    .delete(routes::lift_control::<C>),
            )
            .route("/dead-letters", get(routes::dead_letters::<C>))
            .route("/dead-letters/replay", post(routes::replay::<C>))
            .route("/dead-letters/discard", post(routes::discard::<C>))
            .with_state(self.state)
    }
}

async fn check<A: Authorize>(State(authorize): State<A>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    if !authorize.authorize(&parts) {
        return AdminError::unauthorized().into_response();
    }
    next.run(Request::from_parts(parts, body)).await
}
