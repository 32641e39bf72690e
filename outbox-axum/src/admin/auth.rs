//! Who may use the admin router.

use axum::http::header::{AUTHORIZATION, COOKIE};
use axum::http::request::Parts;

/// The dashboard's cookie: the token typed into its login form.
pub(crate) const COOKIE_NAME: &str = "outbox_admin_token";

/// Decides whether a request may use the admin routes; a refused request
/// gets 401 and changes nothing.
///
/// Implemented by [`BearerToken`] and by any `Fn(&Parts) -> bool` (a
/// predicate over the request's method, URI, headers and extensions, e.g.
/// one that trusts what an authentication layer of your own put there).
pub trait Authorize: Clone + Send + Sync + 'static {
    /// Whether the request may go on.
    fn authorize(&self, request: &Parts) -> bool;

    /// Whether `token`, typed into the dashboard's login form, is the
    /// credential; the browser then keeps it in an `HttpOnly`,
    /// `SameSite=Strict` cookie that [`authorize`](Self::authorize) must
    /// accept. `false` by default: the login form then refuses everyone, and
    /// the dashboard is for browsers that `authorize` lets in otherwise.
    fn accepts_token(&self, token: &str) -> bool {
        let _ = token;
        false
    }
}

impl<F> Authorize for F
where
    F: Fn(&Parts) -> bool + Clone + Send + Sync + 'static,
{
    fn authorize(&self, request: &Parts) -> bool {
        self(request)
    }
}

/// `Authorization: Bearer <token>`, or the dashboard's cookie holding the
/// token (set by its login form), compared in constant time.
#[derive(Clone)]
pub struct BearerToken {
    token: std::sync::Arc<[u8]>,
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BearerToken").finish_non_exhaustive()
    }
}

impl BearerToken {
    /// Accepts requests that carry `token`.
    ///
    /// # Panics
    ///
    /// When `token` is empty: an empty token would let anyone in.
    pub fn new(token: impl Into<String>) -> Self {
        let token: String = token.into();
        assert!(
            !token.is_empty(),
            "an empty admin token would let anyone in"
        );
        Self {
            token: token.into_bytes().into(),
        }
    }
}

impl Authorize for BearerToken {
    fn authorize(&self, request: &Parts) -> bool {
        let bearer = request
            .headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        if bearer.is_some_and(|given| self.accepts_token(given.trim())) {
            return true;
        }
        request
            .headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|cookies| cookies.split(';'))
            .filter_map(|cookie| cookie.trim().split_once('='))
            .any(|(name, value)| name == COOKIE_NAME && self.accepts_token(value))
    }

    fn accepts_token(&self, given: &str) -> bool {
        let given = given.as_bytes();
        // Constant time over the expected token's length.
        let mut differ = u8::from(given.len() != self.token.len());
        for (i, expected) in self.token.iter().enumerate() {
            differ |= expected ^ given.get(i).copied().unwrap_or(0);
        }
        differ == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(authorization: Option<&str>) -> Parts {
        with_header(AUTHORIZATION, authorization)
    }

    fn with_header(name: axum::http::HeaderName, value: Option<&str>) -> Parts {
        let mut builder = axum::http::Request::builder();
        if let Some(value) = value {
            builder = builder.header(name, value);
        }
        builder.body(()).unwrap().into_parts().0
    }

    #[test]
    fn only_the_exact_bearer_token_is_let_in() {
        let token = BearerToken::new("s3cret");
        assert!(token.authorize(&request(Some("Bearer s3cret"))));
        for refused in [
            None,
            Some("Bearer s3cre"),
            Some("Bearer s3cret2"),
            Some("Bearer "),
            Some("Basic s3cret"),
            Some("s3cret"),
        ] {
            assert!(!token.authorize(&request(refused)), "{refused:?}");
        }
    }

    #[test]
    fn the_dashboard_cookie_lets_in_only_with_the_exact_token() {
        let token = BearerToken::new("s3cret");
        let cookie = |value: &str| with_header(COOKIE, Some(value));
        assert!(token.authorize(&cookie("outbox_admin_token=s3cret")));
        assert!(token.authorize(&cookie("a=b; outbox_admin_token=s3cret; c=d")));
        for refused in [
            "outbox_admin_token=s3cre",
            "outbox_admin_token=",
            "other=s3cret",
            "outbox_admin_token_x=s3cret",
        ] {
            assert!(!token.authorize(&cookie(refused)), "{refused:?}");
        }
        assert!(token.accepts_token("s3cret"));
        assert!(!token.accepts_token("s3cret "));
        let predicate = |_: &Parts| true;
        assert!(!predicate.accepts_token("s3cret"), "no login by default");
    }
}
