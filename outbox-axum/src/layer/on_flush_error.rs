use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use outbox_core::FlushError;

/// The header that tells a client its request's outbox rows were not all
/// delivered before the response: [`FLUSH_DEFERRED`], [`FLUSH_PAUSED`],
/// [`FLUSH_FAILED`] or [`FLUSH_CULLED`]. Absent when everything the request
/// wrote was delivered (or it wrote nothing). In every case but `culled`
/// the change is committed and the background drain delivers it later.
pub const FLUSH_HEADER: &str = "outbox-flush";

/// `outbox-flush: deferred`: committed, and left to the background drain,
/// which delivers it shortly, nothing being wrong: the request deferred its
/// flush (`flush = false`, [`deferred`](crate::deferred)), or another
/// worker was delivering the shard and did not let go within the flush's
/// wait. Nothing for a client to do.
pub const FLUSH_DEFERRED: &str = "deferred";

/// `outbox-flush: paused`: committed, and kept until an operator resumes
/// the shard (or its scope): delivered then, in order. A client may tell
/// its user that the side effects wait for maintenance.
pub const FLUSH_PAUSED: &str = "paused";

/// `outbox-flush: failed`: committed, but a receiver failed (or the shard
/// backs off after an earlier failure, or is quarantined, or the claim was
/// lost): the background drain retries it with backoff, or an operator
/// acts. A client that needs the side effect before going on should not
/// assume it has happened.
pub const FLUSH_FAILED: &str = "failed";

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

/// The `outbox-flush` value that says what happened to a request whose
/// flush ended with `errors`: [`FLUSH_PAUSED`] when every shard was paused
/// by an operator, [`FLUSH_FAILED`] when any delivery failed (or backs off,
/// or lost its claim), [`FLUSH_DEFERRED`] otherwise (shards held by
/// another worker past the flush's wait). For hooks of your own.
pub fn flush_header_value(errors: &[FlushError]) -> &'static str {
    let failed = errors.iter().any(|error| {
        matches!(
            error,
            FlushError::Delivery { .. }
                | FlushError::BackingOff { .. }
                | FlushError::ClaimLost { .. }
        )
    });
    if failed {
        FLUSH_FAILED
    } else if !errors.is_empty()
        && errors
            .iter()
            .all(|error| matches!(error, FlushError::Paused { .. }))
    {
        FLUSH_PAUSED
    } else {
        FLUSH_DEFERRED
    }
}

/// The default: the handler's response, with `outbox-flush` saying why
/// ([`flush_header_value`]: `paused`, `failed` or `deferred`).
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultOnFlushError;

impl OnFlushError for DefaultOnFlushError {
    fn on_flush_error(&self, errors: &[FlushError], mut response: Response) -> Response {
        response.headers_mut().insert(
            FLUSH_HEADER,
            HeaderValue::from_static(flush_header_value(errors)),
        );
        response
    }
}

/// Answer with this status instead, with `outbox-flush` saying why (as
/// [`DefaultOnFlushError`]) and a body saying the change was saved and its
/// side effects are delayed.
#[derive(Clone, Copy, Debug)]
pub struct RespondWith(pub StatusCode);

impl OnFlushError for RespondWith {
    fn on_flush_error(&self, errors: &[FlushError], _response: Response) -> Response {
        let mut response = (
            self.0,
            "the change was saved; its side effects are delayed and will be delivered",
        )
            .into_response();
        response.headers_mut().insert(
            FLUSH_HEADER,
            HeaderValue::from_static(flush_header_value(errors)),
        );
        response
    }
}
