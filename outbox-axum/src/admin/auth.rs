//! Who may use the admin router, and what they may do.

use axum::http::header::COOKIE;
use axum::http::request::Parts;

/// The dashboard's session cookie, scoped to the router's mount path.
pub(crate) const COOKIE_NAME: &str = "outbox_admin_session";
/// The same behind TLS ([`Admin::secure_cookies`](super::Admin::secure_cookies)):
/// `Secure`, `Path=/`, and no other site or subdomain can set it.
pub(crate) const SECURE_COOKIE_NAME: &str = "__Host-outbox_admin_session";

/// The values of the session cookies a request carries.
pub(crate) fn session_cookies(request: &Parts) -> impl Iterator<Item = &str> {
    request
        .headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|cookies| cookies.split(';'))
        .filter_map(|cookie| cookie.trim().split_once('='))
        .filter(|(name, _)| *name == COOKIE_NAME || *name == SECURE_COOKIE_NAME)
        .map(|(_, value)| value)
}

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
/// Implemented by [`BearerToken`](super::BearerToken) and by any
/// `Fn(&Parts) -> Option<Principal>` (a function of the request's method,
/// URI, headers and extensions, e.g. one that trusts what an
/// authentication layer of your own put there).
pub trait Authorize: Clone + Send + Sync + 'static {
    /// Who makes the request, or `None` to refuse it.
    fn authorize(&self, request: &Parts) -> Option<Principal>;

    /// The dashboard's login form: whose `token` this is, and the session
    /// the browser keeps instead of it (in an `HttpOnly`,
    /// `SameSite=Strict` cookie that [`authorize`](Self::authorize) must
    /// accept, for [`Session::lifetime`]). `None` by default: the login
    /// form then refuses everyone, and the dashboard is for browsers that
    /// `authorize` lets in otherwise.
    fn login(&self, token: &str) -> Option<Session> {
        let _ = token;
        None
    }

    /// Ends the session `request` carries (the dashboard's logout), so that
    /// a copy of its cookie is refused too. Nothing by default.
    fn logout(&self, request: &Parts) {
        let _ = request;
    }
}

/// What the dashboard's login gives a browser.
#[derive(Clone, Debug)]
pub struct Session {
    /// Who logged in.
    pub principal: Principal,
    /// The cookie's value: never the token itself.
    pub value: String,
    /// How long the browser keeps it (the server refuses it after that).
    pub lifetime: std::time::Duration,
}

impl<F> Authorize for F
where
    F: Fn(&Parts) -> Option<Principal> + Clone + Send + Sync + 'static,
{
    fn authorize(&self, request: &Parts) -> Option<Principal> {
        self(request)
    }
}
