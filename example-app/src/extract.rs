//! The extractors of the example's routes: JSON bodies, paths and queries
//! whose rejections are [`ApiError`]s (`{"error": ...}` with the status
//! HTTP means), and JSON bodies [`Validate`]d before the handler sees them.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::Json;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::validate::Validate;

/// `Json<T>` whose rejections are `{"error": ...}` with the status HTTP
/// means, and whose value is [`Validate`]d before the handler sees it.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned + Validate, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(request, state).await {
            Ok(Json(value)) => {
                value.validate()?;
                Ok(ApiJson(value))
            }
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// A rejected JSON body, with the status HTTP means for it: 408 when the
/// client took longer than the body timeout to send it, 413 when it is too
/// large, 415 without a JSON content type, 400 otherwise (malformed JSON, or
/// JSON of the wrong shape, which axum answers 422).
fn json_rejection(rejection: JsonRejection) -> ApiError {
    if caused_by::<tower_http::timeout::TimeoutError>(&rejection) {
        return ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "the request body took too long to arrive",
        );
    }
    let status = match rejection.status() {
        status @ (StatusCode::PAYLOAD_TOO_LARGE | StatusCode::UNSUPPORTED_MEDIA_TYPE) => status,
        _ => StatusCode::BAD_REQUEST,
    };
    ApiError::new(status, format!("malformed body: {}", rejection.body_text()))
}

/// Whether `error`, or an error in its source chain, is an `E`.
fn caused_by<E: std::error::Error + 'static>(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if error.is::<E>() {
            return true;
        }
        next = error.source();
    }
    false
}

/// `Path<T>` whose rejections are 400 `{"error": ...}`.
#[derive(Debug)]
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| ApiPath(value))
            .map_err(|rejection: PathRejection| ApiError::bad_request(rejection.body_text()))
    }
}

/// `Query<T>` whose rejections are 400 `{"error": ...}`.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| ApiQuery(value))
            .map_err(|rejection: QueryRejection| ApiError::bad_request(rejection.body_text()))
    }
}
