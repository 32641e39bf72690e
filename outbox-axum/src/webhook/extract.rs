//! The extractors: a request's body once its signature is checked.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::Json;
use outbox_core::sink::webhook::WebhookKeys;
use serde::de::DeserializeOwned;

use super::check::{check, AlreadyVerified};
use super::rejection::WebhookRejection;

/// Extractor: the request's JSON body as a `T`, once its Standard Webhooks
/// signature, its timestamp and its signed delivery headers are checked
/// (see [the module documentation](super)). Refused with a
/// [`WebhookRejection`].
///
/// It consumes the body: put it last among the handler's arguments. It
/// verifies with the `Extension<WebhookKeys>` of the router, or not again
/// behind the [`verify`](super::verify) middleware.
#[derive(Clone, Copy, Debug, Default)]
pub struct Verified<T>(pub T);

/// Extractor: the request's body as bytes, once verified as
/// [`Verified`] does.
#[derive(Clone, Debug, Default)]
pub struct VerifiedBytes(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for VerifiedBytes {
    type Rejection = WebhookRejection;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        // Behind the `verify` middleware: verified already.
        let keys = match request.extensions().get::<AlreadyVerified>() {
            Some(AlreadyVerified) => None,
            None => Some(
                request
                    .extensions()
                    .get::<WebhookKeys>()
                    .cloned()
                    .ok_or(WebhookRejection::MissingKeys)?,
            ),
        };
        let headers = request.headers().clone();
        let body = Bytes::from_request(request, state).await?;
        if let Some(keys) = keys {
            check(&keys, &headers, &body)?;
        }
        Ok(Self(body))
    }
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Verified<T> {
    type Rejection = WebhookRejection;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let VerifiedBytes(body) = VerifiedBytes::from_request(request, state).await?;
        let Json(value) = Json::<T>::from_bytes(&body)?;
        Ok(Self(value))
    }
}
