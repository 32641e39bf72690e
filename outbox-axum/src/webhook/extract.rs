//! The extractors: a request's body once its signature is checked.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::Json;
use outbox_core::sink::webhook::WebhookKeys;
use serde::de::DeserializeOwned;

use super::check::{check, AlreadyVerified, WebhookDelivery};
use super::rejection::WebhookRejection;

/// Extractor: the request's JSON body as a `T`, and what it was signed as
/// (its `webhook-id` and timestamp: [`WebhookDelivery`]), once its
/// Standard Webhooks signature, its timestamp and its signed delivery
/// headers are checked (see [the module documentation](super)). Refused
/// with a [`WebhookRejection`].
///
/// It consumes the body: put it last among the handler's arguments. It
/// verifies with the `Extension<WebhookKeys>` of the router, or not again
/// behind the [`verify`](super::verify) middleware.
///
/// ```
/// use outbox_axum::webhook::Verified;
/// #[derive(serde::Deserialize)]
/// struct PriceChanged { cents: i64 }
/// async fn hook(Verified(price, delivery): Verified<PriceChanged>) -> String {
///     format!("{} at {}: {} cents", delivery.id(), delivery.signed_at(), price.cents)
/// }
/// # let _: axum::Router = axum::Router::new().route("/hook", axum::routing::post(hook));
/// ```
#[derive(Clone, Debug)]
pub struct Verified<T>(pub T, pub WebhookDelivery);

/// Extractor: the request's body as bytes, and what it was signed as,
/// once verified as [`Verified`] does.
#[derive(Clone, Debug)]
pub struct VerifiedBytes(pub Bytes, pub WebhookDelivery);

impl<S: Send + Sync> FromRequest<S> for VerifiedBytes {
    type Rejection = WebhookRejection;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        // Behind the `verify` middleware: verified already.
        let verified = request
            .extensions()
            .get::<AlreadyVerified>()
            .map(|AlreadyVerified(delivery)| delivery.clone());
        if let Some(delivery) = verified {
            let body = Bytes::from_request(request, state).await?;
            return Ok(Self(body, delivery));
        }
        let keys = request
            .extensions()
            .get::<WebhookKeys>()
            .cloned()
            .ok_or(WebhookRejection::MissingKeys)?;
        let headers = request.headers().clone();
        let body = Bytes::from_request(request, state).await?;
        let checked = check(&keys, &headers, &body)?;
        Ok(Self(body, checked.delivery))
    }
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Verified<T> {
    type Rejection = WebhookRejection;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let VerifiedBytes(body, delivery) = VerifiedBytes::from_request(request, state).await?;
        let Json(value) = Json::<T>::from_bytes(&body)?;
        Ok(Self(value, delivery))
    }
}
