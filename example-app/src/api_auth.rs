//! The public API's authentication: a bearer token per user, issued by
//! Control, checked by every silo before the outbox layer (and so before
//! any transaction).
//!
//! A token is `<user id>.<expiry, Unix seconds>.<signature>`, the signature
//! made with the silos' API token key by the library's Standard Webhooks
//! signing (`WebhookKeys::sign` of the user, the expiry and a fixed tag),
//! checked in constant time. Every silo holds the key (`--api-token-key`),
//! so any silo verifies a token without asking Control; a token is valid
//! until its expiry (no revocation: keep them short, rotate the key to
//! revoke them all, two keys during a rotation).
//!
//! What a request to `/api/0/...` needs:
//!
//! - creating a user (`POST /api/0/users`) and issuing a token
//!   (`POST /api/0/users/{id}/tokens`): the admin token (`--admin-token`);
//! - everything else, reads included: a user's token, or the admin token.
//!
//! Anything else is answered 401 with a JSON error, before the outbox layer
//! runs. Who may change what (a user their own record, a member their
//! organizations) is not modelled: any valid token may use the whole API.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header::AUTHORIZATION, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use outbox_core::sink::webhook::WebhookKeys;

use crate::error::ApiError;

/// What the signature of a token covers besides the user and expiry: never
/// an RPC envelope (those start with `{`).
const TOKEN_TAG: &[u8] = b"example-app-api-token-v1";

/// Default lifetime of an issued token: 24 hours.
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// The longest lifetime a token is issued with: 30 days.
pub const MAX_TOKEN_TTL: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// Why a bearer token was refused. Never holds the token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// No `authorization: Bearer …`.
    #[error("missing credentials: send `authorization: Bearer <token>` (a token from Control's POST /api/0/users/{{id}}/tokens)")]
    Missing,
    /// Not a token, or not signed with the silos' key.
    #[error("invalid token")]
    Invalid,
    /// Signed, but past its expiry.
    #[error("the token expired: ask Control for a new one")]
    Expired,
    /// The route needs the admin token.
    #[error("this route needs the admin token")]
    NotAdmin,
}

/// The signing keys of the API tokens, shared by every silo.
#[derive(Clone, Debug)]
pub struct ApiTokens {
    keys: WebhookKeys,
}

impl ApiTokens {
    /// Tokens signed with `keys` (the first signs; any verifies).
    pub fn new(keys: WebhookKeys) -> Self {
        Self { keys }
    }

    /// A token for `user_id`, valid until `expires` (Unix seconds).
    pub fn issue(&self, user_id: i64, expires: i64) -> String {
        let signatures = self.keys.sign(&subject(user_id), expires, TOKEN_TAG);
        // The first key's signature: `v1,<base64>`.
        let first = signatures.split(' ').next().unwrap_or_default();
        let signature = first.strip_prefix("v1,").unwrap_or(first);
        format!("{user_id}.{expires}.{signature}")
    }

    /// The user of `token`, if it was issued with one of the keys and has
    /// not expired at `now` (Unix seconds).
    ///
    /// # Errors
    ///
    /// [`TokenError::Invalid`] or [`TokenError::Expired`].
    pub fn verify(&self, token: &str, now: i64) -> Result<i64, TokenError> {
        let mut parts = token.splitn(3, '.');
        let (Some(user), Some(expires), Some(signature)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Invalid);
        };
        let user: i64 = user.parse().map_err(|_| TokenError::Invalid)?;
        let expiry: i64 = expires.parse().map_err(|_| TokenError::Invalid)?;
        if base64::engine::general_purpose::STANDARD
            .decode(signature)
            .is_err()
        {
            return Err(TokenError::Invalid);
        }
        // Checked at the expiry itself: the library's window is about replay,
        // the expiry is checked below.
        self.keys
            .verify_at(
                &subject(user),
                expires,
                &format!("v1,{signature}"),
                TOKEN_TAG,
                expiry,
            )
            .map_err(|_| TokenError::Invalid)?;
        if expiry <= now {
            return Err(TokenError::Expired);
        }
        Ok(user)
    }
}

fn subject(user_id: i64) -> String {
    format!("user_{user_id}")
}

/// Who made an API request, as its credentials say: [`require_token`]
/// puts it in the request's extensions, and audit events record it
/// (`admin`, `user_42`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Actor {
    /// The silo's admin token.
    Admin,
    /// A user's token.
    User(i64),
}

impl std::fmt::Display for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Admin => f.write_str("admin"),
            Self::User(id) => f.write_str(&subject(*id)),
        }
    }
}

/// What the public API's middleware checks against. Its `Debug` shows
/// whether there is an admin token, never the token (nor the keys).
#[derive(Clone)]
pub struct ApiAuth {
    /// The token keys.
    pub tokens: ApiTokens,
    /// The admin token, if the silo has one.
    pub admin_token: Option<String>,
}

impl std::fmt::Debug for ApiAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let admin_token = if self.admin_token.is_some() {
            "<redacted>"
        } else {
            "<none>"
        };
        f.debug_struct("ApiAuth")
            .field("tokens", &self.tokens)
            .field("admin_token", &admin_token)
            .finish()
    }
}

impl ApiAuth {
    fn is_admin(&self, given: &str) -> bool {
        let Some(admin) = &self.admin_token else {
            return false;
        };
        // In constant time over the token's length.
        bool::from(subtle::ConstantTimeEq::ct_eq(
            given.as_bytes(),
            admin.as_bytes(),
        ))
    }

    /// Checks a request to `method path` with `authorization`: who makes
    /// it.
    ///
    /// # Errors
    ///
    /// [`TokenError`].
    pub fn check(
        &self,
        method: &Method,
        path: &str,
        authorization: Option<&str>,
    ) -> Result<Actor, TokenError> {
        let token = authorization
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|token| !token.is_empty())
            .ok_or(TokenError::Missing)?;
        if self.is_admin(token) {
            return Ok(Actor::Admin);
        }
        // A user's valid token first (401 otherwise), then whether the
        // route is for the admin only (403).
        let user = self.tokens.verify(token, chrono::Utc::now().timestamp())?;
        if needs_admin(method, path) {
            return Err(TokenError::NotAdmin);
        }
        Ok(Actor::User(user))
    }
}

/// Creating users and issuing tokens: the admin token only.
fn needs_admin(method: &Method, path: &str) -> bool {
    *method == Method::POST
        && (path == "/api/0/users"
            || (path.starts_with("/api/0/users/") && path.ends_with("/tokens")))
}

/// Middleware in front of the outbox layer: a request under `/api/0/`
/// without valid credentials is answered 401 (403 for a user's token on an
/// admin route) before anything else runs, and an admitted one carries its
/// [`Actor`] as an extension; other paths pass.
pub async fn require_token(
    State(auth): State<ApiAuth>,
    mut request: Request,
    next: Next,
) -> Response {
    if !request.uri().path().starts_with("/api/") {
        return next.run(request).await;
    }
    let authorization = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    match auth.check(request.method(), request.uri().path(), authorization) {
        Ok(actor) => {
            request.extensions_mut().insert(actor);
            next.run(request).await
        }
        Err(error) => {
            let status = match error {
                TokenError::NotAdmin => StatusCode::FORBIDDEN,
                _ => StatusCode::UNAUTHORIZED,
            };
            let mut response = ApiError::new(status, error.to_string()).into_response();
            if status == StatusCode::UNAUTHORIZED {
                response.headers_mut().insert(
                    axum::http::header::WWW_AUTHENTICATE,
                    axum::http::HeaderValue::from_static("Bearer"),
                );
            }
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::sink::webhook::WebhookSecret;

    fn tokens(fill: u8) -> ApiTokens {
        ApiTokens::new(WebhookKeys::new(
            WebhookSecret::from_bytes(vec![fill; 32]).unwrap(),
        ))
    }

    #[test]
    fn a_token_is_valid_until_its_expiry_and_only_with_the_key() {
        let keys = tokens(1);
        let token = keys.issue(42, 2_000);
        assert_eq!(keys.verify(&token, 1_999), Ok(42));
        assert_eq!(keys.verify(&token, 2_000), Err(TokenError::Expired));
        assert_eq!(tokens(2).verify(&token, 1_000), Err(TokenError::Invalid));
        // Another user or a later expiry with the same signature.
        let signature = token.rsplit('.').next().unwrap();
        for forged in [
            format!("43.2000.{signature}"),
            format!("42.9000.{signature}"),
            "42.2000.".to_owned(),
            "42.2000".to_owned(),
            "nonsense".to_owned(),
            String::new(),
        ] {
            assert_eq!(
                keys.verify(&forged, 1_000),
                Err(TokenError::Invalid),
                "{forged}"
            );
        }
    }

    #[test]
    fn its_debug_shows_neither_the_admin_token_nor_the_key() {
        let key =
            WebhookSecret::from_bytes(b"api-token-key-never-shown-0123456789".to_vec()).unwrap();
        let exposed = key.expose();
        let auth = ApiAuth {
            tokens: ApiTokens::new(WebhookKeys::new(key)),
            admin_token: Some("admin-t0ken-never-shown-0123456789".into()),
        };
        let shown = format!("{auth:?}");
        for secret in [
            "admin-t0ken-never-shown",
            exposed.as_str(),
            &exposed["whsec_".len()..],
            "api-token-key-never-shown",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("admin_token: \"<redacted>\""), "{shown}");
        let without = ApiAuth {
            admin_token: None,
            ..auth
        };
        assert!(format!("{without:?}").contains("<none>"));
    }

    #[test]
    fn creating_users_and_tokens_needs_the_admin_token() {
        let auth = ApiAuth {
            tokens: tokens(1),
            admin_token: Some("admin-token-admin-token".into()),
        };
        let user = format!("Bearer {}", auth.tokens.issue(7, i64::MAX));
        let post = Method::POST;
        assert_eq!(
            auth.check(&post, "/api/0/users", Some(&user)),
            Err(TokenError::NotAdmin)
        );
        assert_eq!(
            auth.check(&post, "/api/0/users/7/tokens", Some(&user)),
            Err(TokenError::NotAdmin)
        );
        assert_eq!(
            auth.check(&post, "/api/0/organizations", Some(&user)),
            Ok(Actor::User(7))
        );
        let admin = Some("Bearer admin-token-admin-token");
        assert_eq!(auth.check(&post, "/api/0/users", admin), Ok(Actor::Admin));
        assert_eq!(
            auth.check(&post, "/api/0/users", None),
            Err(TokenError::Missing)
        );
        assert_eq!(
            auth.check(
                &Method::GET,
                "/api/0/users/7",
                Some("Bearer admin-token-admin-tokeX")
            ),
            Err(TokenError::Invalid)
        );
    }
}
