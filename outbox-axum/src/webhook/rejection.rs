//! Why a request was not accepted as a signed delivery.

use axum::extract::rejection::{BytesRejection, JsonRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use outbox_core::sink::webhook::VerifyError;

/// Why [`Verified`](super::Verified), [`VerifiedBytes`](super::VerifiedBytes)
/// or the [`verify`](super::verify) middleware refused a request. The
/// response says which check failed, never with a key or a signature
/// that would have matched.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum WebhookRejection {
    /// No keys to verify with: neither the [`verify`](super::verify)
    /// middleware ran, nor is there an `Extension<WebhookKeys>`. `500`.
    #[error(
        "no webhook keys to verify the request with: add `.layer(Extension(webhook_keys))` to the \
         router, or the `outbox_axum::webhook::verify` middleware in front of the route"
    )]
    MissingKeys,
    /// A required header is missing (`webhook-id`, `webhook-timestamp`,
    /// `webhook-signature`; `outbox-signature` is
    /// [`UnsignedDeliveryHeaders`](Self::UnsignedDeliveryHeaders)). `400`.
    #[error("the `{header}` header is missing: this is not a signed webhook delivery")]
    MissingHeader {
        /// The header.
        header: &'static str,
    },
    /// A header is not what it must be. `400`.
    #[error("the `{header}` header is malformed: {reason}")]
    MalformedHeader {
        /// The header.
        header: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The timestamp is further from this server's clock than the
    /// tolerance: a replay, or a clock that is off. `401`.
    #[error("{0}")]
    OutsideTolerance(VerifyError),
    /// No signature matches: the body, the id or the timestamp were
    /// changed, or the request was signed with a key this endpoint does not
    /// have. `401`.
    #[error(
        "no webhook signature matches: the request was changed on the way, or signed with a key \
         this endpoint does not have"
    )]
    InvalidSignature,
    /// `outbox-*` delivery headers came without a signature that covers
    /// them as they are (see `outbox_core::sink::webhook`). `401`.
    #[error(
        "the outbox delivery headers are not covered by a matching `outbox-signature`: they were \
         changed or added on the way"
    )]
    UnsignedDeliveryHeaders,
    /// The body could not be read (too large: `413`, see axum's
    /// `DefaultBodyLimit`).
    #[error(transparent)]
    Body(#[from] BytesRejection),
    /// The verified body is not the JSON `T` expected (`400` or `422`, as
    /// axum's `Json`).
    #[error(transparent)]
    Json(#[from] JsonRejection),
}

crate::error_debug::debug_with_message!(WebhookRejection {
    MissingKeys,
    MissingHeader,
    MalformedHeader,
    OutsideTolerance,
    InvalidSignature,
    UnsignedDeliveryHeaders,
    Body,
    Json
});

impl WebhookRejection {
    /// The response status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::MissingKeys => StatusCode::INTERNAL_SERVER_ERROR,
            Self::MissingHeader { .. } | Self::MalformedHeader { .. } => StatusCode::BAD_REQUEST,
            Self::OutsideTolerance(_) | Self::InvalidSignature | Self::UnsignedDeliveryHeaders => {
                StatusCode::UNAUTHORIZED
            }
            Self::Body(rejection) => rejection.status(),
            Self::Json(rejection) => rejection.status(),
        }
    }

    /// The response body.
    pub fn body_text(&self) -> String {
        match self {
            Self::Body(rejection) => rejection.body_text(),
            Self::Json(rejection) => rejection.body_text(),
            other => other.to_string(),
        }
    }

    pub(super) fn from_verify(error: VerifyError) -> Self {
        match error {
            VerifyError::MalformedId => Self::MalformedHeader {
                header: outbox_core::sink::webhook::ID_HEADER,
                reason: "empty, or contains `.`",
            },
            VerifyError::MalformedTimestamp => Self::MalformedHeader {
                header: outbox_core::sink::webhook::TIMESTAMP_HEADER,
                reason: "not a Unix time in seconds (digits only)",
            },
            VerifyError::NoMatchingSignature => Self::InvalidSignature,
            outside => Self::OutsideTolerance(outside),
        }
    }
}

impl IntoResponse for WebhookRejection {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(rejection = %self, "webhook: refused");
        } else {
            tracing::debug!(status = status.as_u16(), rejection = %self, "webhook: refused");
        }
        (status, self.body_text()).into_response()
    }
}
