//! [`RequirePrincipalLayer`]: the admin router's door, in front of routes
//! of your own (a `/metrics` scrape, a debug page), sharing its throttle.

use std::convert::Infallible;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::Response;
use futures::future::{ready, Either, Ready};
use tower::{Layer, Service};

use super::auth::Authorize;
use super::gate::Gate;

/// Lets in a request that `A` authorises (any [`Role`](super::Role)), with
/// its [`Principal`](super::Principal) in the request's extensions;
/// answers `401` otherwise, and `429` to a client over its allowance of
/// wrong credentials, counted with the admin router's own (see
/// [`Admin::require_principal`](super::Admin::require_principal)).
///
/// ```no_run
/// # fn app<C: outbox_core::Category>(drainer: outbox_core::Drainer<C>) -> axum::Router {
/// use axum::routing::get;
/// use outbox_axum::admin::{Admin, BearerToken};
///
/// let tokens = BearerToken::new(std::env::var("OUTBOX_ADMIN_TOKEN").unwrap()).unwrap();
/// let admin = Admin::new(drainer);
/// // A wrong token here counts against the client as on the admin routes.
/// let metrics = axum::Router::new()
///     .route("/metrics", get(|| async { "# metrics" }))
///     .route_layer(admin.require_principal(tokens.clone()));
/// axum::Router::new()
///     .merge(metrics)
///     .nest("/admin/outbox", admin.router(tokens))
/// # }
/// ```
#[derive(Clone)]
pub struct RequirePrincipalLayer<A> {
    gate: Gate<A>,
}

impl<A> std::fmt::Debug for RequirePrincipalLayer<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequirePrincipalLayer")
            .field("client_address", &self.gate.client_address)
            .finish_non_exhaustive()
    }
}

impl<A> RequirePrincipalLayer<A> {
    pub(crate) fn new(gate: Gate<A>) -> Self {
        Self { gate }
    }
}

impl<S, A: Clone> Layer<S> for RequirePrincipalLayer<A> {
    type Service = RequirePrincipal<S, A>;

    fn layer(&self, inner: S) -> Self::Service {
        RequirePrincipal {
            inner,
            gate: self.gate.clone(),
        }
    }
}

/// The service of [`RequirePrincipalLayer`].
#[derive(Clone)]
pub struct RequirePrincipal<S, A> {
    inner: S,
    gate: Gate<A>,
}

impl<S, A> std::fmt::Debug for RequirePrincipal<S, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequirePrincipal").finish_non_exhaustive()
    }
}

impl<S, A> Service<Request> for RequirePrincipal<S, A>
where
    S: Service<Request, Response = Response, Error = Infallible>,
    A: Authorize,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<Ready<Result<Response, Infallible>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        match self.gate.admit(&parts) {
            Ok(principal) => {
                parts.extensions.insert(principal);
                Either::Right(self.inner.call(Request::from_parts(parts, body)))
            }
            Err(refused) => Either::Left(ready(Ok(refused.into_api_response()))),
        }
    }
}
