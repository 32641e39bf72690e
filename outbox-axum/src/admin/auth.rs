//! Who may use the admin router.

use axum::http::header::{AUTHORIZATION, COOKIE};
use axum::http::request::Parts;

/// The dashboard's cookie: the token typed into its login form.
pub(crate) const COOKIE_NAME: &str = "outbox_admin_token";

/// What a caller of the admin API may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads everything (health, shards, dead letters, controls, the audit
    /// log); every change is refused with `403 forbidden` (and recorded).
    Viewer,
    /// Reads and changes: pauses, culls, resumes, retries, replays and
    /// discards dead letters.
    Operator,
}

impl Role {
    /// `viewer` or `operator`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
        }
    }

    /// Whether this role may change anything.
    pub fn can_act(self) -> bool {
        self == Role::Operator
    }
}

/// Who calls the admin API: a name (recorded in the audit log) and a
/// [`Role`]. An [`Authorize`] returns one for each request it lets in;
/// with [`Admin::router_behind`](super::Admin::router_behind), your layer
/// may insert one into the request's extensions.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Principal {
    name: String,
    role: Role,
}

impl Principal {
    /// `name`, who may read and change.
    pub fn operator(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            role: Role::Operator,
        }
    }

    /// `name`, who may only read.
    pub fn viewer(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            role: Role::Viewer,
        }
    }

    /// The name recorded in the audit log.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it may do.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Behind a layer of your own that named nobody: an operator, recorded
    /// as `unnamed`.
    pub(crate) fn unnamed() -> Self {
        Self::operator("unnamed")
    }
}

/// Decides who makes a request to the admin routes; a refused request gets
/// 401 and changes nothing, a [viewer](Role::Viewer)'s change 403.
///
/// Implemented by [`BearerToken`] and by any
/// `Fn(&Parts) -> Option<Principal>` (a function of the request's method,
/// URI, headers and extensions, e.g. one that trusts what an
/// authentication layer of your own put there).
pub trait Authorize: Clone + Send + Sync + 'static {
    /// Who makes the request, or `None` to refuse it.
    fn authorize(&self, request: &Parts) -> Option<Principal>;

    /// Whose `token`, typed into the dashboard's login form, this is; the
    /// browser then keeps it in an `HttpOnly`, `SameSite=Strict` cookie
    /// that [`authorize`](Self::authorize) must accept. `None` by default:
    /// the login form then refuses everyone, and the dashboard is for
    /// browsers that `authorize` lets in otherwise.
    fn login(&self, token: &str) -> Option<Principal> {
        let _ = token;
        None
    }
}

impl<F> Authorize for F
where
    F: Fn(&Parts) -> Option<Principal> + Clone + Send + Sync + 'static,
{
    fn authorize(&self, request: &Parts) -> Option<Principal> {
        self(request)
    }
}

/// `Authorization: Bearer <token>`, or the dashboard's cookie holding the
/// token (set by its login form), compared in constant time with each
/// token it knows; each token names a [`Principal`].
///
/// ```
/// use outbox_axum::admin::{BearerToken, Role};
/// let tokens = BearerToken::new("an operator's token of 32 bytes or more")
///     .viewer("on-call", "a viewer's token, also 32 bytes or more");
/// # let _ = tokens;
/// ```
#[derive(Clone)]
pub struct BearerToken {
    tokens: std::sync::Arc<[(Box<[u8]>, Principal)]>,
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
            .finish_non_exhaustive()
    }
}

impl BearerToken {
    /// Accepts requests that carry `token`, as an operator named `admin`.
    ///
    /// # Panics
    ///
    /// When `token` is empty: an empty token would let anyone in.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            tokens: std::sync::Arc::new([]),
        }
        .with(Principal::operator("admin"), token.into())
    }

    /// Also accepts `token`, as the operator `name`.
    ///
    /// # Panics
    ///
    /// When `token` is empty, or is already one of this authoriser's.
    pub fn operator(self, name: impl Into<String>, token: impl Into<String>) -> Self {
        self.with(Principal::operator(name), token.into())
    }

    /// Also accepts `token`, as the viewer `name`: it may read, not change.
    ///
    /// # Panics
    ///
    /// When `token` is empty, or is already one of this authoriser's.
    pub fn viewer(self, name: impl Into<String>, token: impl Into<String>) -> Self {
        self.with(Principal::viewer(name), token.into())
    }

    fn with(self, principal: Principal, token: String) -> Self {
        assert!(
            !token.is_empty(),
            "an empty admin token would let anyone in"
        );
        assert!(
            self.matching(&token).is_none(),
            "two principals share one admin token"
        );
        let mut tokens: Vec<(Box<[u8]>, Principal)> = self.tokens.to_vec();
        tokens.push((token.into_bytes().into_boxed_slice(), principal));
        Self {
            tokens: tokens.into(),
        }
    }

    /// The principal whose token `given` is: every token is compared, each
    /// in constant time over its length.
    fn matching(&self, given: &str) -> Option<Principal> {
        let given = given.as_bytes();
        let mut found = None;
        for (token, principal) in self.tokens.iter() {
            let mut differ = u8::from(given.len() != token.len());
            for (i, expected) in token.iter().enumerate() {
                differ |= expected ^ given.get(i).copied().unwrap_or(0);
            }
            if differ == 0 {
                found = Some(principal.clone());
            }
        }
        found
    }
}

impl Authorize for BearerToken {
    fn authorize(&self, request: &Parts) -> Option<Principal> {
        let bearer = request
            .headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        if let Some(principal) = bearer.and_then(|given| self.matching(given.trim())) {
            return Some(principal);
        }
        request
            .headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|cookies| cookies.split(';'))
            .filter_map(|cookie| cookie.trim().split_once('='))
            .filter(|(name, _)| *name == COOKIE_NAME)
            .find_map(|(_, value)| self.matching(value))
    }

    fn login(&self, given: &str) -> Option<Principal> {
        self.matching(given)
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
        assert_eq!(
            token.authorize(&request(Some("Bearer s3cret"))),
            Some(Principal::operator("admin"))
        );
        for refused in [
            None,
            Some("Bearer s3cre"),
            Some("Bearer s3cret2"),
            Some("Bearer "),
            Some("Basic s3cret"),
            Some("s3cret"),
        ] {
            assert_eq!(token.authorize(&request(refused)), None, "{refused:?}");
        }
    }

    #[test]
    fn the_dashboard_cookie_lets_in_only_with_the_exact_token() {
        let token = BearerToken::new("s3cret");
        let cookie = |value: &str| with_header(COOKIE, Some(value));
        assert!(token
            .authorize(&cookie("outbox_admin_token=s3cret"))
            .is_some());
        assert!(token
            .authorize(&cookie("a=b; outbox_admin_token=s3cret; c=d"))
            .is_some());
        for refused in [
            "outbox_admin_token=s3cre",
            "outbox_admin_token=",
            "other=s3cret",
            "outbox_admin_token_x=s3cret",
        ] {
            assert_eq!(token.authorize(&cookie(refused)), None, "{refused:?}");
        }
        assert!(token.login("s3cret").is_some());
        assert_eq!(token.login("s3cret "), None);
        let predicate = |_: &Parts| Some(Principal::operator("anyone"));
        assert_eq!(predicate.login("s3cret"), None, "no login by default");
    }

    #[test]
    fn each_token_names_its_principal_and_role() {
        let tokens = BearerToken::new("operator-token")
            .viewer("on-call", "viewer-token")
            .operator("deploy-bot", "bot-token");
        let who = |token: &str| tokens.authorize(&request(Some(&format!("Bearer {token}"))));
        assert_eq!(who("operator-token"), Some(Principal::operator("admin")));
        assert_eq!(who("viewer-token"), Some(Principal::viewer("on-call")));
        assert_eq!(who("bot-token"), Some(Principal::operator("deploy-bot")));
        assert_eq!(who("viewer-toke"), None);
        assert_eq!(
            tokens.login("viewer-token").map(|p| p.role()),
            Some(Role::Viewer)
        );
        assert!(!format!("{tokens:?}").contains("token\""), "{tokens:?}");
        assert!(!format!("{tokens:?}").contains("viewer-token"));
    }

    #[test]
    #[should_panic(expected = "two principals share one admin token")]
    fn two_principals_cannot_share_a_token() {
        let _ = BearerToken::new("same").viewer("v", "same");
    }
}
