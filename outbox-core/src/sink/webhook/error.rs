//! Deliveries that failed, and which of them a retry can fix (rule 10).

use std::time::Duration;

use reqwest::StatusCode;
use uuid::Uuid;

use crate::receiver::{permanent, retry_after, HandlerError};

/// How much of a refusing response's body an error keeps: 256 bytes.
pub(super) const MAX_BODY_IN_ERROR: usize = 256;

/// A sink that cannot be made.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum WebhookSetupError {
    /// The URL does not parse. The message leaves the URL out (it may hold
    /// a password or a token).
    #[error("the webhook URL does not parse: {reason}; give an absolute http:// or https:// URL")]
    InvalidUrl {
        /// What the parser said.
        reason: String,
    },
    /// The URL's scheme is not `http` or `https`.
    #[error("the webhook URL's scheme is `{scheme}`: give an http:// or https:// URL")]
    UnsupportedScheme {
        /// The scheme.
        scheme: String,
    },
    /// The HTTP client could not be built (its TLS backend, its resolver).
    #[error("the webhook sink's HTTP client could not be built: {0}")]
    Client(#[source] reqwest::Error),
}

crate::error_debug::debug_with_message!(WebhookSetupError {
    InvalidUrl,
    UnsupportedScheme,
    Client
});

/// A delivery the endpoint did not accept. Its messages show the endpoint
/// without credentials, query or fragment, and never a secret.
///
/// | failure | error | what the drain does |
/// |---|---|---|
/// | no answer within the timeout | [`Timeout`](Self::Timeout) | transient: backoff, retry |
/// | no connection (refused, reset, DNS) | [`Connect`](Self::Connect) | transient |
/// | any other failure of the request | [`Request`](Self::Request) | transient |
/// | `5xx`, `408 Request Timeout`, `429 Too Many Requests` | [`Status`](Self::Status) | transient, waiting at least its `Retry-After` |
/// | any other `4xx`, a `3xx` (redirects are not followed) | [`Status`](Self::Status) | permanent: quarantine or dead letter |
/// | a stored payload that is not JSON (written by hand on SQLite) | [`PayloadNotJson`](Self::PayloadNotJson) | permanent, nothing sent |
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// No answer in time. The endpoint may have applied the message or not;
    /// the retry carries the same `webhook-id`.
    #[error(
        "webhook {endpoint} did not answer message {message_id} within {timeout:?}; it may have \
         applied it or not: the shard backs off and retries with the same webhook-id"
    )]
    Timeout {
        /// The endpoint, without credentials or query.
        endpoint: String,
        /// The message id.
        message_id: Uuid,
        /// The timeout.
        timeout: Duration,
    },
    /// No connection to the endpoint.
    #[error(
        "could not connect to webhook {endpoint} for message {message_id}: {source}; the shard \
         backs off and retries"
    )]
    Connect {
        /// The endpoint, without credentials or query.
        endpoint: String,
        /// The message id.
        message_id: Uuid,
        /// The client's error (without the URL).
        source: reqwest::Error,
    },
    /// The request failed otherwise (the connection dropped mid-way, a
    /// protocol error).
    #[error(
        "webhook request to {endpoint} for message {message_id} failed: {source}; the shard backs \
         off and retries"
    )]
    Request {
        /// The endpoint, without credentials or query.
        endpoint: String,
        /// The message id.
        message_id: Uuid,
        /// The client's error (without the URL).
        source: reqwest::Error,
    },
    /// The message's stored payload is not JSON (a row written by hand on
    /// SQLite, whose `json` column is text): not sent. Permanent.
    #[error(
        "message {message_id}'s stored payload is not JSON (written outside the library?), so it \
         is not sent to webhook {endpoint}; it is quarantined, or dead-lettered where its scope \
         allows, until an operator sets it aside"
    )]
    PayloadNotJson {
        /// The endpoint, without credentials or query.
        endpoint: String,
        /// The message id.
        message_id: Uuid,
    },
    /// The endpoint answered with a status that is not a success.
    #[error(
        "webhook {endpoint} answered {status} to message {message_id}{retry}: {body:?}; {what}",
        retry = .retry_after.map(|after| format!(" (Retry-After: {}s)", after.as_secs())).unwrap_or_default(),
        what = what_happens(*.status)
    )]
    Status {
        /// The endpoint, without credentials or query.
        endpoint: String,
        /// The message id.
        message_id: Uuid,
        /// The status.
        status: StatusCode,
        /// The delay its `Retry-After` asked for, if any.
        retry_after: Option<Duration>,
        /// The start of its body (up to 256 bytes, invalid UTF-8 replaced).
        body: String,
    },
}

crate::error_debug::debug_with_message!(WebhookError {
    Timeout,
    Connect,
    Request,
    PayloadNotJson,
    Status
});

/// What the drain does after `status`, for the error's message.
fn what_happens(status: StatusCode) -> &'static str {
    if is_permanent_status(status) {
        "the endpoint refuses the message itself, so it is not retried: it is quarantined, or \
         dead-lettered where its scope allows, until an operator releases it (check the \
         endpoint's URL, its keys and what it accepts)"
    } else {
        "the shard backs off and retries"
    }
}

/// Whether no retry can fix a delivery answered with `status`: a `3xx` or
/// a `4xx` other than `408` and `429`.
fn is_permanent_status(status: StatusCode) -> bool {
    status.is_redirection()
        || (status.is_client_error()
            && status != StatusCode::REQUEST_TIMEOUT
            && status != StatusCode::TOO_MANY_REQUESTS)
}

impl WebhookError {
    /// Whether retrying cannot help: a `3xx`, or a `4xx` other than `408`
    /// and `429`. [`WebhookSink::receiver`](super::WebhookSink::receiver)
    /// returns those as [`permanent`](crate::permanent) errors.
    pub fn is_permanent(&self) -> bool {
        match self {
            Self::Status { status, .. } => is_permanent_status(*status),
            Self::PayloadNotJson { .. } => true,
            _ => false,
        }
    }

    /// The delay the endpoint asked for with `Retry-After`, on a transient
    /// status.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Status {
                status,
                retry_after,
                ..
            } if !is_permanent_status(*status) => *retry_after,
            _ => None,
        }
    }

    /// The status the endpoint answered, if it answered.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub(super) fn from_client(
        endpoint: &str,
        message_id: Uuid,
        timeout: Duration,
        source: reqwest::Error,
    ) -> Self {
        let endpoint = endpoint.to_owned();
        let source = source.without_url();
        if source.is_timeout() {
            Self::Timeout {
                endpoint,
                message_id,
                timeout,
            }
        } else if source.is_connect() {
            Self::Connect {
                endpoint,
                message_id,
                source,
            }
        } else {
            Self::Request {
                endpoint,
                message_id,
                source,
            }
        }
    }
}

/// A failed delivery as the drain takes it: permanent when
/// [`WebhookError::is_permanent`], with the endpoint's `Retry-After` when
/// it asked for one.
pub(super) fn to_handler_error(error: WebhookError) -> HandlerError {
    if error.is_permanent() {
        permanent(error)
    } else if let Some(after) = error.retry_after() {
        retry_after(error, after)
    } else {
        HandlerError::from(error)
    }
}

/// The delay of a `Retry-After` value at `now`: seconds (`120`), or an
/// HTTP date (`Wed, 21 Oct 2015 07:28:00 GMT`; a date past gives zero).
/// `None` when it is neither.
pub(super) fn parse_retry_after(
    value: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64: as long as can be (capped by the drain).
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    Some((date.to_utc() - now).to_std().unwrap_or(Duration::ZERO))
}

/// `url` without credentials, query or fragment: what errors and logs show.
pub(super) fn redacted(url: &reqwest::Url) -> String {
    let mut shown = format!("{}://{}", url.scheme(), url.host_str().unwrap_or(""));
    if let Some(port) = url.port() {
        shown.push_str(&format!(":{port}"));
    }
    shown.push_str(url.path());
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn statuses_split_into_transient_and_permanent() {
        let error = |status: u16, retry_after| WebhookError::Status {
            endpoint: "http://hooks.example/in".to_owned(),
            message_id: Uuid::nil(),
            status: StatusCode::from_u16(status).unwrap(),
            retry_after,
            body: String::new(),
        };
        for transient in [500, 502, 503, 504, 408, 429] {
            assert!(!error(transient, None).is_permanent(), "{transient}");
        }
        for refused in [400, 401, 403, 404, 409, 410, 413, 422, 301, 302, 307] {
            assert!(error(refused, None).is_permanent(), "{refused}");
        }
        let asked = Some(Duration::from_secs(7));
        assert_eq!(error(429, asked).retry_after(), asked);
        assert_eq!(error(503, asked).retry_after(), asked);
        assert_eq!(error(400, asked).retry_after(), None);

        let handler = to_handler_error(error(429, asked));
        assert!(!crate::is_permanent(handler.as_ref()));
        assert_eq!(crate::requested_retry_after(handler.as_ref()), asked);
        let handler = to_handler_error(error(401, None));
        assert!(crate::is_permanent(handler.as_ref()));
        assert_eq!(crate::requested_retry_after(handler.as_ref()), None);
        let handler = to_handler_error(error(500, None));
        assert!(!crate::is_permanent(handler.as_ref()));
        assert_eq!(crate::requested_retry_after(handler.as_ref()), None);
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = chrono::Utc
            .with_ymd_and_hms(2015, 10, 21, 7, 27, 0)
            .unwrap();
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX))
        );
        for bad in ["", "-1", "1.5", "soon"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn errors_show_the_endpoint_without_credentials_or_query() {
        let url =
            reqwest::Url::parse("https://user:hunter2@hooks.example:8443/in/x?token=s3cret#f")
                .unwrap();
        assert_eq!(redacted(&url), "https://hooks.example:8443/in/x");
        let error = WebhookError::Status {
            endpoint: redacted(&url),
            message_id: Uuid::nil(),
            status: StatusCode::UNAUTHORIZED,
            retry_after: None,
            body: "bad\0signature".to_owned(),
        };
        let text = error.to_string();
        assert!(
            !text.contains("hunter2") && !text.contains("s3cret"),
            "{text}"
        );
        assert!(text.contains("401 Unauthorized"), "{text}");
        assert!(text.contains("quarantined"), "{text}");
        assert!(text.contains(r#""bad\0signature""#), "{text}");
    }
}
