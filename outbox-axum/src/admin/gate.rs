//! The router's door: who may come in ([`Authorize`]), how often a client
//! may get the credentials wrong ([`Throttle`]), what the session cookie
//! looks like, and the headers every answer carries.

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, CACHE_CONTROL, RETRY_AFTER, X_FRAME_OPTIONS};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::auth::{session_cookies, Authorize, Principal, COOKIE_NAME, SECURE_COOKIE_NAME};
use super::error::AdminError;
use super::throttle::{ClientAddress, NoClientAddress, Throttle};

/// What the authorising middleware and the login form share.
#[derive(Clone)]
pub(crate) struct Gate<A> {
    pub(crate) authorize: A,
    pub(crate) throttle: Throttle,
    /// Where the client's address comes from.
    pub(crate) client_address: ClientAddress,
    /// Behind TLS: `Secure`, `__Host-` cookies.
    pub(crate) secure: bool,
}

/// Why a request was not let in.
pub(crate) enum Refused {
    /// The client cannot be told apart from others: a server set-up error.
    NoClientAddress(NoClientAddress),
    /// Too many failures from this client: come back after this long.
    Throttled(std::time::Duration),
    /// No credentials, or wrong ones.
    Unauthorized,
}

impl Refused {
    /// `500`/`400`, `429` with `Retry-After`, or `401`, as JSON.
    pub(crate) fn into_api_response(self) -> Response {
        match self {
            Refused::NoClientAddress(missing) => no_client_address(&missing).into_response(),
            Refused::Throttled(after) => throttled(after),
            Refused::Unauthorized => AdminError::unauthorized().into_response(),
        }
    }
}

/// `500 no_client_address` when the server gives no peer address (a set-up
/// error, logged with its fix), `400` when the trusted header has none.
pub(crate) fn no_client_address(missing: &NoClientAddress) -> AdminError {
    match missing {
        NoClientAddress::NoConnectInfo => {
            // Once per process: every request would say the same.
            static LOGGED: std::sync::Once = std::sync::Once::new();
            LOGGED.call_once(|| tracing::error!(
                "outbox admin: a request came without the client's address, so wrong \
                 credentials cannot be counted per client: serve the router with \
                 `into_make_service_with_connect_info::<SocketAddr>()`, or behind a reverse \
                 proxy set `Admin::client_address(ClientAddress::trusted_header(\"x-forwarded-for\"))`"
            ));
            AdminError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "no_client_address",
                "the server does not give the admin router the client's address; its log says how \
                 to fix it",
            )
        }
        NoClientAddress::NoHeader(header) => AdminError::new(
            StatusCode::BAD_REQUEST,
            "no_client_address",
            format!("no client address in `{header}` (set by the reverse proxy)"),
        ),
    }
}

/// `429 too_many_attempts` with `Retry-After` in whole seconds.
pub(crate) fn throttled(after: std::time::Duration) -> Response {
    let seconds = after.as_secs().max(1);
    let mut response = AdminError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_attempts",
        format!("too many wrong credentials from this client; try again in {seconds} s"),
    )
    .into_response();
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(seconds));
    response
}

impl<A: Authorize> Gate<A> {
    /// Who makes the request; a client that offered credentials that are
    /// refused counts a failure, and one over its failures is not checked
    /// at all.
    pub(crate) fn admit(&self, parts: &Parts) -> Result<Principal, Refused> {
        let client = self.client(parts)?;
        self.throttle.check(client).map_err(Refused::Throttled)?;
        match self.authorize.authorize(parts) {
            Some(principal) => Ok(principal),
            None => {
                let offered = parts.headers.contains_key(AUTHORIZATION)
                    || session_cookies(parts).next().is_some();
                if offered {
                    self.throttle.failed(client);
                }
                Err(Refused::Unauthorized)
            }
        }
    }

    /// The address the throttle counts `parts`' failures for.
    pub(crate) fn client(&self, parts: &Parts) -> Result<std::net::IpAddr, Refused> {
        self.client_address
            .of(parts)
            .map_err(Refused::NoClientAddress)
    }

    /// The session cookie's name and attributes, without its value.
    pub(crate) fn cookie(&self, mount: &str) -> (&'static str, String) {
        if self.secure {
            (
                SECURE_COOKIE_NAME,
                "Path=/; Secure; HttpOnly; SameSite=Strict".to_owned(),
            )
        } else {
            (
                COOKIE_NAME,
                format!("Path={mount}; HttpOnly; SameSite=Strict"),
            )
        }
    }
}

/// The JSON API behind the gate: `401` (or `429`) as JSON, the principal in
/// the request's extensions otherwise.
pub(crate) async fn check<A: Authorize>(
    State(gate): State<Gate<A>>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    match gate.admit(&parts) {
        Ok(principal) => {
            parts.extensions.insert(principal);
            next.run(Request::from_parts(parts, body)).await
        }
        Err(refused) => refused.into_api_response(),
    }
}

/// On every answer of the router: never cached (they hold what only an
/// operator should see), never framed by another page (a framed dashboard
/// could be clicked on by a page that lays itself over it), not sniffed.
pub(crate) async fn headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        axum::http::header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("frame-ancestors 'none'; base-uri 'none'; form-action 'self'"),
    );
    headers.insert(
        axum::http::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        axum::http::header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}
