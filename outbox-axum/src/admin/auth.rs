//! Who may use the admin router.

use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

/// Decides whether a request may use the admin routes; a refused request
/// gets 401 and changes nothing.
///
/// Implemented by [`BearerToken`] and by any `Fn(&Parts) -> bool` (a
/// predicate over the request's method, URI, headers and extensions, e.g.
/// one that trusts what an authentication layer of your own put there).
pub trait Authorize: Clone + Send + Sync + 'static {
    /// Whether the request may go on.
    fn authorize(&self, request: &Parts) -> bool;
}

impl<F> Authorize for F
where
    F: Fn(&Parts) -> bool + Clone + Send + Sync + 'static,
{
    fn authorize(&self, request: &Parts) -> bool {
        self(request)
    }
}

/// `Authorization: Bearer <token>`, compared in constant time.
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
        let Some(given) = request
            .headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
        else {
            return false;
        };
        let given = given.trim().as_bytes();
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
        let mut builder = axum::http::Request::builder();
        if let Some(value) = authorization {
            builder = builder.header(AUTHORIZATION, value);
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
}
