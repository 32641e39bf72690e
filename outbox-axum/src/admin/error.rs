//! The admin routes' errors: JSON with a status that says what happened.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;

use outbox_core::StoreError;

/// An admin request that failed: `{"error": {"code": ..., "message": ...}}`
/// with its status, and `"id"` when the server logged the cause (a store
/// failure: the database's own text stays in the log, under that id).
#[derive(Debug, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct AdminError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable, machine-readable code (`unauthorized`, `forbidden`,
    /// `bad_request`, `unknown_shard`, `store_unavailable`, …).
    pub code: &'static str,
    /// For people.
    pub message: String,
    /// The correlation id of the server's log line with the cause.
    pub id: Option<String>,
}

impl AdminError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            id: None,
        }
    }

    /// A failure whose cause (`error`, which may hold database text) goes
    /// to the log only, under a fresh correlation id that the answer
    /// carries.
    pub(crate) fn logged(
        status: StatusCode,
        code: &'static str,
        message: &str,
        error: &dyn std::fmt::Display,
    ) -> Self {
        let id = format!("{:016x}", rand::random::<u64>());
        tracing::error!(%error, correlation_id = %id, code, "outbox admin: {message}");
        Self {
            status,
            code,
            message: format!("{message}; the server's log has the cause under id {id}"),
            id: Some(id),
        }
    }

    pub(crate) fn forbidden(role: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("a {role} may read, not change"),
        )
    }

    pub(crate) fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this route needs the admin credentials",
        )
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub(crate) fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }
}

impl From<StoreError> for AdminError {
    fn from(error: StoreError) -> Self {
        Self::logged(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            "the outbox store failed",
            &error,
        )
    }
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let body = match &self.id {
            Some(id) => serde_json::json!({
                "error": { "code": self.code, "message": self.message, "id": id }
            }),
            None => serde_json::json!({
                "error": { "code": self.code, "message": self.message }
            }),
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

/// A JSON body whose rejection is an [`AdminError`]: 415 without a JSON
/// content type, 400 for JSON that does not parse, 422 for JSON of the
/// wrong shape, 413 when too large.
pub(crate) struct AdminJson<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for AdminJson<T> {
    type Rejection = AdminError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(request, state).await {
            Ok(Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> AdminError {
    let (code, status) = match &rejection {
        JsonRejection::MissingJsonContentType(_) => {
            ("unsupported_media_type", StatusCode::UNSUPPORTED_MEDIA_TYPE)
        }
        JsonRejection::JsonDataError(_) => ("invalid_body", StatusCode::UNPROCESSABLE_ENTITY),
        JsonRejection::BytesRejection(_) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            ("payload_too_large", StatusCode::PAYLOAD_TOO_LARGE)
        }
        _ => ("bad_request", StatusCode::BAD_REQUEST),
    };
    AdminError::new(status, code, rejection.body_text())
}

/// A query string whose rejection is an [`AdminError`] (400).
pub(crate) struct AdminQuery<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for AdminQuery<T> {
    type Rejection = AdminError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Self(value)),
            Err(rejection) => Err(query_rejection(&rejection)),
        }
    }
}

fn query_rejection(rejection: &QueryRejection) -> AdminError {
    AdminError::bad_request(rejection.body_text())
}
