//! The RPC routes' first middleware: who calls, proven by their key.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::header::CONTENT_LENGTH;
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use outbox_axum::webhook::{VerifiedBytes, WebhookKeys, WebhookRejection};
use outbox_core::delivery_headers::{MESSAGE_ID_HEADER, SENDER_HEADER};

use super::signed::Envelope;
use crate::error::ApiError;

/// Who may call a silo's RPC routes: the silos that may, by name, with
/// their keys ([`super::RpcKeys::peers`]), and the name of the silo the
/// routes serve, which every call's envelope must name.
#[derive(Clone)]
pub struct Peers {
    silo: Arc<str>,
    keys: Arc<BTreeMap<String, WebhookKeys>>,
}

impl Peers {
    /// The RPC callers of silo `silo` (`control`, or a region's name): the
    /// silos of `keys`, verified with their keys.
    pub fn new(silo: impl Into<Arc<str>>, keys: BTreeMap<String, WebhookKeys>) -> Self {
        Self {
            silo: silo.into(),
            keys: Arc::new(keys),
        }
    }

    /// The silo the routes serve.
    pub fn silo(&self) -> &str {
        &self.silo
    }
}

/// Shows the silo and its callers' names, never their keys.
impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peers")
            .field("silo", &self.silo)
            .field("callers", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Why an RPC was refused before its route ran. Nothing is written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RpcRejection {
    /// No `outbox-sender`: who calls is unknown.
    #[error("an RPC must name its caller (outbox-sender) and be signed with its key")]
    NoCaller,
    /// The `outbox-sender` is not a silo that may call this one.
    #[error("silo {0:?} may not call this silo's RPC")]
    UnknownCaller(String),
    /// No `outbox-message-id`: the call could not be applied once.
    #[error("an RPC must carry its outbox message id (outbox-message-id), signed")]
    NoMessageId,
    /// The signature, the timestamp or a signed header did not pass.
    #[error("{}", .0.body_text())]
    Signature(WebhookRejection),
    /// The signed body is not an RPC envelope.
    #[error("the signed body is not an RPC envelope (method, path, body)")]
    NotAnEnvelope,
    /// The envelope was signed for another method or path.
    #[error("the call was signed for {signed}, not for this route")]
    OtherRoute {
        /// What was signed (`PUT /rpc/users/5`).
        signed: String,
    },
    /// The envelope was signed for another silo (a call replayed from the
    /// silo it was sent to), or names none (a caller older than the
    /// envelope's `recipient`: upgrade it).
    #[error(
        "the call was signed for silo {signed_for:?}, not for this one ({silo:?}); \
         a silo sending an envelope without a recipient must be upgraded"
    )]
    OtherSilo {
        /// The silo the envelope names (empty when none).
        signed_for: String,
        /// This silo.
        silo: String,
    },
}

impl RpcRejection {
    /// The response status: 401 when who calls is not proven, 400 for a
    /// malformed call.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::NoCaller
            | Self::UnknownCaller(_)
            | Self::OtherRoute { .. }
            | Self::OtherSilo { .. } => StatusCode::UNAUTHORIZED,
            Self::NoMessageId | Self::NotAnEnvelope => StatusCode::BAD_REQUEST,
            Self::Signature(rejection) => rejection.status(),
        }
    }
}

impl IntoResponse for RpcRejection {
    fn into_response(self) -> Response {
        tracing::debug!(status = self.status().as_u16(), rejection = %self, "rpc: refused");
        ApiError::new(self.status(), self.to_string()).into_response()
    }
}

/// Middleware of the RPC routes, outside [`super::apply_once`]: refuses a
/// call that is not signed with the key of the silo it names in
/// `outbox-sender` (one of `peers`), that is outside the time window (5
/// minutes), that carries no signed message id, or whose signed envelope
/// names another silo, method or path. A call that passes reaches the
/// route with the envelope's body as its body and its [`Caller`] in its
/// extensions.
pub async fn authenticate(State(peers): State<Peers>, request: Request, next: Next) -> Response {
    match admit(&peers, request).await {
        Ok(request) => next.run(request).await,
        Err(rejection) => rejection.into_response(),
    }
}

async fn admit(peers: &Peers, request: Request) -> Result<Request, RpcRejection> {
    let (sender, keys) = caller_of(peers, request.headers())?;
    let (mut parts, body) = request.into_parts();
    let mut signed = Request::from_parts(parts.clone(), body);
    signed.extensions_mut().insert(keys);
    let VerifiedBytes(bytes, _) = VerifiedBytes::from_request(signed, &())
        .await
        .map_err(RpcRejection::Signature)?;
    let envelope: Envelope =
        serde_json::from_slice(&bytes).map_err(|_| RpcRejection::NotAnEnvelope)?;
    if envelope.recipient != peers.silo() {
        return Err(RpcRejection::OtherSilo {
            signed_for: envelope.recipient,
            silo: peers.silo().to_owned(),
        });
    }
    if envelope.method != parts.method.as_str() || envelope.path != parts.uri.path() {
        return Err(RpcRejection::OtherRoute {
            signed: format!("{} {}", envelope.method, envelope.path),
        });
    }
    parts.extensions.insert(Caller(sender));
    parts.headers.remove(CONTENT_LENGTH);
    let body = match envelope.body {
        Some(body) => Body::from(serde_json::to_vec(&body).unwrap_or_default()),
        None => Body::empty(),
    };
    Ok(Request::from_parts(parts, body))
}

/// The silo a call names, with its keys; refused unless it names one of
/// `peers` and carries a message id (signed with the other delivery
/// headers, and checked to be the `webhook-id`: the inbox records it, so a
/// replay is applied once).
fn caller_of(
    peers: &Peers,
    headers: &axum::http::HeaderMap,
) -> Result<(String, WebhookKeys), RpcRejection> {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    let sender = header(SENDER_HEADER).ok_or(RpcRejection::NoCaller)?;
    let keys = peers
        .keys
        .get(sender)
        .ok_or_else(|| RpcRejection::UnknownCaller(sender.to_owned()))?;
    if header(MESSAGE_ID_HEADER).is_none() {
        return Err(RpcRejection::NoMessageId);
    }
    Ok((sender.to_owned(), keys.clone()))
}

/// Extractor: the silo that made this RPC, proven by its key
/// ([`authenticate`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller(String);

impl Caller {
    /// The calling silo's name (`control`, `us`).
    pub fn silo(&self) -> &str {
        &self.0
    }

    /// Refuses (403) unless the caller is region `region`: a region writes
    /// only its own rows.
    ///
    /// # Errors
    ///
    /// An [`ApiError`] with 403.
    pub fn must_be_region(&self, region: &str) -> Result<(), ApiError> {
        if self.0 == region {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!("silo {:?} may not write rows of region {region:?}", self.0),
            ))
        }
    }

    /// Refuses (403) unless `id` was allocated by the caller's region: its
    /// region code (the low bits, [`crate::ids::region_of`]) is the
    /// caller's. Ids are striped per region, so a region that registered
    /// an id of another's stripe first would have the other's own call
    /// refused.
    ///
    /// # Errors
    ///
    /// An [`ApiError`] with 403, naming the region the id belongs to.
    pub fn must_own_id(&self, what: &str, id: i64) -> Result<(), ApiError> {
        let code = crate::ids::region_of(id);
        if crate::ids::region_code(&self.0) == Some(code) {
            return Ok(());
        }
        let owner = crate::ids::REGION_CODES
            .iter()
            .find(|(_, known)| *known == code)
            .map_or_else(
                || format!("no region's (code {code})"),
                |(name, _)| format!("region {name:?}'s"),
            );
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "silo {:?} may not register {what} {id}: the id is {owner}, and a region \
                 registers only ids it allocated (`ids::next_id`)",
                self.0
            ),
        ))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            tracing::error!("an RPC route without `rpc::authenticate`");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal error (route_layer `rpc::authenticate` missing)",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_may_write_its_own_rows_only() {
        let us = Caller("us".into());
        assert!(us.must_be_region("us").is_ok());
        let refused = us.must_be_region("de").unwrap_err();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
        assert!(Caller("control".into()).must_be_region("us").is_err());
    }

    #[test]
    fn a_region_may_register_ids_of_its_own_stripe_only() {
        use crate::ids::REGION_STRIDE;
        let (us, de) = (Caller("us".into()), Caller("de".into()));
        let us_id = 7 * REGION_STRIDE + crate::ids::region_code("us").unwrap();
        let de_id = 7 * REGION_STRIDE + crate::ids::region_code("de").unwrap();
        assert!(us.must_own_id("organization", us_id).is_ok());
        assert!(de.must_own_id("organization", de_id).is_ok());
        let refused = us.must_own_id("organization", de_id).unwrap_err();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
        let shown = format!("{refused:?}");
        assert!(shown.contains(r#"region \"de\"'s"#), "{shown}");
        // An id of no region's stripe, and Control, which allocates none.
        assert!(us.must_own_id("organization", 7 * REGION_STRIDE).is_err());
        assert!(Caller("control".into())
            .must_own_id("organization", us_id)
            .is_err());
    }
}
