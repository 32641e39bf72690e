use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use outbox_core::FlushError;

/// The header set when a flush failed and delivery was left to the drain.
pub const FLUSH_HEADER: &str = "outbox-flush";

/// Decides what the client hears when the synchronous flush after a commit
/// fails. The change is committed either way, and the background drain
/// delivers its rows after the shard's backoff.
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
            .insert(FLUSH_HEADER, HeaderValue::from_static("deferred"));
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
            .insert(FLUSH_HEADER, HeaderValue::from_static("deferred"));
        response
    }
}
