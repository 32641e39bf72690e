use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use outbox_core::FlushError;

/// The header that tells a client its request's outbox rows were not all
/// delivered before the response: [`FLUSH_DEFERRED`] or [`FLUSH_CULLED`].
/// Absent when everything the request wrote was delivered (or it wrote
/// nothing).
pub const FLUSH_HEADER: &str = "outbox-flush";

/// `outbox-flush: deferred`: committed, and left to the background drain,
/// which delivers it later: the request deferred its flush (`flush = false`,
/// [`deferred`](crate::deferred)), the shard is paused by an operator, backs
/// off after a failure, was held by another worker too long, or the
/// receiver failed.
pub const FLUSH_DEFERRED: &str = "deferred";

/// `outbox-flush: culled`: committed, and dropped without delivery by an
/// operator's cull of the shard or its scope.
pub const FLUSH_CULLED: &str = "culled";

/// Decides what the client hears when the synchronous flush after a commit
/// fails (or finds the shard paused by an operator). The change is committed
/// either way, and the background drain delivers its rows after the shard's
/// backoff (or the pause).
///
/// Implemented for `()` (keep the handler's response as it is), for closures
/// `Fn(&[FlushError], Response) -> Response`, for [`DefaultOnFlushError`] (the
/// default) and for [`RespondWith`]. See "When hooks run" in the
/// [module documentation](crate::layer).
pub trait OnFlushError: Send + Sync + 'static {
    /// Called once per request, after the commit, when at least one shard's
    /// flush failed; `errors` name each failed category, shard and receiver
    /// error. Returns the response to send.
    fn on_flush_error(&self, errors: &[FlushError], response: Response) -> Response;
}

impl OnFlushError for () {
    fn on_flush_error(&self, _errors: &[FlushError], response: Response) -> Response {
        response
    }
}

impl<F> OnFlushError for F
where
    F: Fn(&[FlushError], Response) -> Response + Send + Sync + 'static,
{
    fn on_flush_error(&self, errors: &[FlushError], response: Response) -> Response {
        self(errors, response)
    }
}

/// The default: the handler's response, with `outbox-flush: deferred`.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultOnFlushError;

impl OnFlushError for DefaultOnFlushError {
    fn on_flush_error(&self, _errors: &[FlushError], mut response: Response) -> Response {
        response
            .headers_mut()
            .insert(FLUSH_HEADER, HeaderValue::from_static(FLUSH_DEFERRED));
        response
    }
}

/// Answer with this status instead, with `outbox-flush: deferred` and a body
/// saying the change was saved and its side effects are delayed.
#[derive(Clone, Copy, Debug)]
pub struct RespondWith(pub StatusCode);

impl OnFlushError for RespondWith {
    fn on_flush_error(&self, _errors: &[FlushError], _response: Response) -> Response {
        let mut response = (
            self.0,
            "the change was saved; its side effects are delayed and will be delivered",
        )
            .into_response();
        response
            .headers_mut()
            .insert(FLUSH_HEADER, HeaderValue::from_static(FLUSH_DEFERRED));
        response
    }
}
