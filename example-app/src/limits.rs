//! What a client may take of a silo: how long to send a request head, how
//! many connections, how long a request may run, and how many public writes
//! per second.
//!
//! The first two act on connections ([`crate::serve`]); the request
//! timeout is `tower_http`'s `TimeoutLayer` around the whole router; the
//! rate limit is `tower_governor` (a GCRA per client IP, from `governor`)
//! on the public write routes only: `POST`, `PUT`, `DELETE` under
//! `/api/0/`. The RPC routes are not limited (a silo's replication comes
//! from one address, and must not be throttled into a backlog); they are
//! signed instead.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Response, StatusCode};
use axum::Router;
use governor::middleware::NoOpMiddleware;
use tower_governor::governor::{GovernorConfig, GovernorConfigBuilder};
use tower_governor::key_extractor::PeerIpKeyExtractor;
use tower_governor::{GovernorError, GovernorLayer};

/// Default [`Limits::header_timeout`]: 5 s.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Default [`Limits::max_connections`]: 1,024.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default [`Limits::request_timeout`]: 30 s.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default [`WriteRate::per_second`]: 50 public writes a second per client.
pub const DEFAULT_WRITES_PER_SECOND: u32 = 50;
/// Default [`WriteRate::burst`]: 100 public writes at once per client.
pub const DEFAULT_WRITE_BURST: u32 = 100;

/// The limits of one silo's listener and requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long a client may take to send a request's head (its request
    /// line and headers), and how long a kept-alive connection may stay
    /// idle: the connection is closed after it. Default:
    /// [`DEFAULT_HEADER_TIMEOUT`].
    pub header_timeout: Duration,
    /// How many connections are served at once; more wait to be accepted.
    /// Default: [`DEFAULT_MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// How long a request may run, body and synchronous flush included
    /// (503 after it; its transaction, if not committed, rolls back).
    /// Default: [`DEFAULT_REQUEST_TIMEOUT`].
    pub request_timeout: Duration,
    /// Public writes per client address; `None` for no limit.
    pub write_rate: Option<WriteRate>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            write_rate: Some(WriteRate::default()),
        }
    }
}

/// A rate of public writes per client address: `burst` at once, then
/// `per_second` (429 with `retry-after` beyond).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteRate {
    /// Writes a second, sustained. Default: [`DEFAULT_WRITES_PER_SECOND`].
    pub per_second: u32,
    /// Writes at once. Default: [`DEFAULT_WRITE_BURST`].
    pub burst: u32,
}

impl Default for WriteRate {
    fn default() -> Self {
        Self {
            per_second: DEFAULT_WRITES_PER_SECOND,
            burst: DEFAULT_WRITE_BURST,
        }
    }
}

/// The rate limiter of a silo's public writes, to put on its public routes
/// ([`WriteLimit::apply`]).
#[derive(Clone, Default)]
pub struct WriteLimit {
    config: Option<Arc<GovernorConfig<PeerIpKeyExtractor, NoOpMiddleware>>>,
}

impl std::fmt::Debug for WriteLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteLimit")
            .field("on", &self.config.is_some())
            .finish()
    }
}

impl WriteLimit {
    /// A limiter at `rate`, none for `None` (or a rate of 0).
    pub fn new(rate: Option<WriteRate>) -> Self {
        let config = rate
            .filter(|rate| rate.per_second > 0 && rate.burst > 0)
            .and_then(|rate| {
                let period = Duration::from_secs(1) / rate.per_second;
                GovernorConfigBuilder::default()
                    .period(period.max(Duration::from_nanos(1)))
                    .burst_size(rate.burst)
                    .methods(vec![
                        Method::POST,
                        Method::PUT,
                        Method::DELETE,
                        Method::PATCH,
                    ])
                    .finish()
            })
            .map(Arc::new);
        Self { config }
    }

    /// `router` with the limit on its write methods (the router unchanged
    /// without a limit). Refusals are the example's JSON errors, 429 with
    /// `retry-after`.
    pub fn apply<S: Clone + Send + Sync + 'static>(&self, router: Router<S>) -> Router<S> {
        match &self.config {
            Some(config) => router.layer(GovernorLayer::new(config.clone()).error_handler(refused)),
            None => router,
        }
    }

    /// Forgets the clients not seen lately (the limiter keeps a state per
    /// address); call it now and then.
    pub fn forget_idle_clients(&self) {
        if let Some(config) = &self.config {
            config.limiter().retain_recent();
        }
    }
}

/// A refusal of the limiter, as the example's `{"error": "..."}`.
fn refused(error: GovernorError) -> Response<Body> {
    let (status, message, headers) = match error {
        GovernorError::TooManyRequests { wait_time, headers } => (
            StatusCode::TOO_MANY_REQUESTS,
            format!("too many writes from this address: retry in {wait_time} s"),
            headers,
        ),
        GovernorError::UnableToExtractKey => {
            tracing::error!("rate limit: no client address (serve with `serve::serve`)");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal error".to_owned(),
                None,
            )
        }
        GovernorError::Other { code, msg, headers } => {
            (code, msg.unwrap_or_else(|| "refused".to_owned()), headers)
        }
    };
    let body = serde_json::json!({ "error": message }).to_string();
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    if let Some(headers) = headers {
        response.headers_mut().extend(headers);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_documented_ones() {
        let limits = Limits::default();
        assert_eq!(limits.header_timeout, Duration::from_secs(5));
        assert_eq!(limits.max_connections, 1024);
        assert_eq!(limits.request_timeout, Duration::from_secs(30));
        assert_eq!(
            limits.write_rate,
            Some(WriteRate {
                per_second: 50,
                burst: 100
            })
        );
        assert!(WriteLimit::new(None).config.is_none());
        assert!(WriteLimit::new(Some(WriteRate {
            per_second: 0,
            burst: 1
        }))
        .config
        .is_none());
    }
}
