//! [`BearerToken`]: admin tokens, each naming a principal, and the
//! dashboard sessions signed with them.

use std::sync::Arc;
use std::time::Duration;

use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use outbox_core::clock::Clock;

use super::auth::{session_cookies, Authorize, Principal, Role, Session};
use super::session::Sessions;

/// The shortest admin token accepted: 32 bytes (`openssl rand -hex 32`
/// gives 64).
pub const MIN_TOKEN_LEN: usize = 32;

/// An admin token that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Shorter than [`MIN_TOKEN_LEN`] bytes: guessable.
    #[error("an admin token needs at least {MIN_TOKEN_LEN} bytes, this one has {len} (generate one with `openssl rand -hex 32`)")]
    TooShort {
        /// Its length.
        len: usize,
    },
    /// Already the token of another principal.
    #[error("two principals cannot share one admin token")]
    Shared,
}

/// `Authorization: Bearer <token>`, compared in constant time with each
/// token it knows, each naming a [`Principal`]; and the dashboard's
/// session, which its login form issues for a token: signed with a key
/// derived from that token (so every process with the same tokens accepts
/// it, and a new token ends the old one's sessions), expiring after
/// [`session_lifetime`](Self::session_lifetime) (12 h), ended for good by
/// a logout in the process that served it (a logout that carries a forged
/// or expired session changes nothing).
///
/// ```
/// use outbox_axum::admin::{BearerToken, TokenError};
/// let tokens = BearerToken::new("an operator's token of 32 bytes or more")?
///     .viewer("on-call", "a viewer's token, also 32 bytes or more")?;
/// assert!(BearerToken::new("short").is_err());
/// # Ok::<(), TokenError>(())
/// ```
#[derive(Clone)]
pub struct BearerToken {
    tokens: Arc<[(Box<[u8]>, Principal)]>,
    sessions: Sessions,
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<(&str, Role)> = self
            .tokens
            .iter()
            .map(|(_, principal)| (principal.name(), principal.role()))
            .collect();
        f.debug_struct("BearerToken")
            .field("principals", &names)
            .field("session_lifetime", &self.sessions.lifetime())
            .finish_non_exhaustive()
    }
}

impl BearerToken {
    /// Accepts requests that carry `token`, as an operator named `admin`.
    ///
    /// # Errors
    ///
    /// [`TokenError::TooShort`] under [`MIN_TOKEN_LEN`] bytes.
    pub fn new(token: impl Into<String>) -> Result<Self, TokenError> {
        Self {
            tokens: Arc::new([]),
            sessions: Sessions::default(),
        }
        .with(Principal::operator("admin"), token.into())
    }

    /// Also accepts `token`, as the operator `name`.
    ///
    /// # Errors
    ///
    /// [`TokenError`]: too short, or already another principal's.
    pub fn operator(
        self,
        name: impl Into<String>,
        token: impl Into<String>,
    ) -> Result<Self, TokenError> {
        self.with(Principal::operator(name), token.into())
    }

    /// Also accepts `token`, as the viewer `name`: it may read, not change.
    ///
    /// # Errors
    ///
    /// [`TokenError`]: too short, or already another principal's.
    pub fn viewer(
        self,
        name: impl Into<String>,
        token: impl Into<String>,
    ) -> Result<Self, TokenError> {
        self.with(Principal::viewer(name), token.into())
    }

    /// How long a dashboard session lasts (default 12 h).
    #[must_use]
    pub fn session_lifetime(mut self, lifetime: Duration) -> Self {
        self.sessions.set_lifetime(lifetime);
        self
    }

    /// The clock sessions expire by (tests move a
    /// [`ManualClock`](outbox_core::ManualClock)).
    #[must_use]
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.sessions.set_clock(Arc::new(clock));
        self
    }

    fn with(self, principal: Principal, token: String) -> Result<Self, TokenError> {
        if token.len() < MIN_TOKEN_LEN {
            return Err(TokenError::TooShort { len: token.len() });
        }
        if self.matching(&token).is_some() {
            return Err(TokenError::Shared);
        }
        let mut tokens: Vec<(Box<[u8]>, Principal)> = self.tokens.to_vec();
        tokens.push((token.into_bytes().into_boxed_slice(), principal));
        Ok(Self {
            tokens: tokens.into(),
            sessions: self.sessions,
        })
    }

    /// The token and principal whose token `given` is: every token is
    /// compared, each in constant time over its length.
    fn matching(&self, given: &str) -> Option<(&[u8], &Principal)> {
        let given = given.as_bytes();
        let mut found = None;
        for (token, principal) in self.tokens.iter() {
            let mut differ = u8::from(given.len() != token.len());
            for (i, expected) in token.iter().enumerate() {
                differ |= expected ^ given.get(i).copied().unwrap_or(0);
            }
            if differ == 0 {
                found = Some((&**token, principal));
            }
        }
        found
    }

    fn known(&self) -> impl Iterator<Item = (&[u8], &Principal)> {
        self.tokens
            .iter()
            .map(|(token, principal)| (&**token, principal))
    }
}

impl Authorize for BearerToken {
    fn authorize(&self, request: &Parts) -> Option<Principal> {
        let bearer = request
            .headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        if let Some((_, principal)) = bearer.and_then(|given| self.matching(given.trim())) {
            return Some(principal.clone());
        }
        session_cookies(request).find_map(|value| self.sessions.check(value, self.known()))
    }

    fn login(&self, given: &str) -> Option<Session> {
        let (token, principal) = self.matching(given)?;
        Some(Session {
            principal: principal.clone(),
            value: self.sessions.issue(principal, token),
            lifetime: self.sessions.lifetime(),
        })
    }

    /// Revokes each session cookie of `request` that checks (signed with
    /// a token of these, not expired): a forged one changes nothing.
    fn logout(&self, request: &Parts) {
        for value in session_cookies(request) {
            self.sessions.revoke(value, self.known());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header::COOKIE;

    const OPERATOR: &str = "the operator's token, 32 bytes long";
    const VIEWER: &str = "the viewer's token, also 32 bytes";

    fn with_header(name: axum::http::HeaderName, value: Option<&str>) -> Parts {
        let mut builder = axum::http::Request::builder();
        if let Some(value) = value {
            builder = builder.header(name, value);
        }
        builder.body(()).unwrap().into_parts().0
    }

    fn bearer(value: Option<&str>) -> Parts {
        with_header(AUTHORIZATION, value)
    }

    #[test]
    fn only_an_exact_token_is_let_in_and_names_its_principal() {
        let tokens = BearerToken::new(OPERATOR)
            .unwrap()
            .viewer("on-call", VIEWER)
            .unwrap();
        let who = |value: &str| tokens.authorize(&bearer(Some(value)));
        assert_eq!(
            who(&format!("Bearer {OPERATOR}")),
            Some(Principal::operator("admin"))
        );
        assert_eq!(
            who(&format!("Bearer {VIEWER}")),
            Some(Principal::viewer("on-call"))
        );
        for refused in [
            format!("Bearer {}", &OPERATOR[1..]),
            format!("Bearer {OPERATOR}x"),
            "Bearer ".to_owned(),
            format!("Basic {OPERATOR}"),
            OPERATOR.to_owned(),
        ] {
            assert_eq!(who(&refused), None, "{refused:?}");
        }
        assert_eq!(tokens.authorize(&bearer(None)), None);
        let debug = format!("{tokens:?}");
        assert!(
            !debug.contains(OPERATOR) && !debug.contains(VIEWER),
            "{debug}"
        );
    }

    #[test]
    fn short_or_shared_tokens_are_refused_at_construction() {
        assert_eq!(
            BearerToken::new("s3cret").unwrap_err(),
            TokenError::TooShort { len: 6 }
        );
        assert_eq!(
            BearerToken::new(OPERATOR)
                .unwrap()
                .viewer("v", OPERATOR)
                .unwrap_err(),
            TokenError::Shared
        );
    }

    #[test]
    fn the_cookie_holds_a_session_not_the_token() {
        let tokens = BearerToken::new(OPERATOR).unwrap();
        let session = tokens.login(OPERATOR).unwrap();
        assert_eq!(session.principal, Principal::operator("admin"));
        assert!(!session.value.contains(OPERATOR));
        let cookie = |value: &str| with_header(COOKIE, Some(value));
        let carried = format!("a=b; outbox_admin_session={}; c=d", session.value);
        assert!(tokens.authorize(&cookie(&carried)).is_some());
        let secure = format!("__Host-outbox_admin_session={}", session.value);
        assert!(tokens.authorize(&cookie(&secure)).is_some());
        // The token itself in the cookie is not a session.
        assert_eq!(
            tokens.authorize(&cookie(&format!("outbox_admin_session={OPERATOR}"))),
            None
        );
        // A rotated token ends the session.
        let rotated = BearerToken::new("a new operator token of 32 bytes!").unwrap();
        assert_eq!(rotated.authorize(&cookie(&carried)), None);
        // A forged session's logout (any MAC, far expiry) ends nothing,
        // and a logout with the real one ends it.
        let (signed, _) = session.value.rsplit_once('.').unwrap();
        let forged = format!("outbox_admin_session={signed}.AAAA");
        tokens.logout(&cookie(&forged));
        assert!(tokens.authorize(&cookie(&carried)).is_some());
        assert_eq!(tokens.sessions.revoked_len(), 0);
        tokens.logout(&cookie(&carried));
        assert_eq!(tokens.authorize(&cookie(&carried)), None);
        assert!(tokens.login("wrong").is_none());
        let predicate = |_: &Parts| Some(Principal::operator("anyone"));
        assert!(predicate.login(OPERATOR).is_none(), "no login by default");
    }
}
