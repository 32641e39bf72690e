//! The dashboard: server-rendered HTML over the same operations as the JSON
//! API, with plain forms (no JavaScript needed).
//!
//! | route | what |
//! |---|---|
//! | `GET /dashboard?kind=region` | the page: health, failing shards first with their last error, the deepest shards with their lag, scopes and controls, dead letters, backfills |
//! | `GET /login`, `POST /login` | the token form ([`Authorize::login`]): a session in an `HttpOnly`, `SameSite=Strict` cookie (never the token), expiring |
//! | `POST /logout` | ends the session ([`Authorize::logout`]) and forgets the cookie |
//! | `POST /actions/{replay,discard,retry,pause,cull,resume,set-aside}` | a form's action; answers `303` back to the page, which says what was done, or a page saying what was wrong (with the error's status) |
//!
//! Forms are refused (`403`) when the browser says they come from another
//! site (`Origin`, `Sec-Fetch-Site`), and when the principal is a
//! [viewer](super::Role::Viewer), who sees the page without its forms.
//!
//! The page shows no text from its query string: after a form, the query
//! names what was done (`done=replayed&count=3`) and the page words it, so
//! that a link made elsewhere cannot put words in the dashboard's mouth.

mod page;

use axum::extract::{Form, FromRequest, NestedPath, Path, RawQuery, Request, State};
use axum::http::header::{CONTENT_TYPE, HOST, LOCATION, ORIGIN, SET_COOKIE};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use serde::{Deserialize, Serialize};

use outbox_core::{Category, ControlAction};

use super::auth::{Authorize, Principal};
use super::error::AdminError;
use super::gate::{no_client_address, throttled, Gate, Refused};
use super::labels;
use super::model::{Kind, ShardRef, TargetRef};
use super::ops::Actor;
use super::{ops, AdminState};

/// `?kind=region&done=replayed&count=3`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PageQuery {
    #[serde(default = "region")]
    kind: Kind,
    /// What the last form did; the page words it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    done: Option<Done>,
    /// How many rows it did it to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    count: Option<u64>,
    /// The scope it did it to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scope: Option<i32>,
    /// The shard it did it to (absent: the whole scope).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    identifier: Option<i64>,
    /// How far back the history charts go, in minutes (60, 360 or 1440).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    minutes: Option<u32>,
}

/// What a form did, as the page's query names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Done {
    Replayed,
    Discarded,
    /// A retried shard is due.
    Due,
    /// A retried shard is held by a worker right now.
    Held,
    Paused,
    Culling,
    Resumed,
    SetAside,
}

impl Default for PageQuery {
    fn default() -> Self {
        Self {
            kind: Kind::Region,
            done: None,
            count: None,
            scope: None,
            identifier: None,
            minutes: None,
        }
    }
}

impl PageQuery {
    /// What the last form did, in the server's words (none from the
    /// query: only its numbers, and the scope's name from the registry).
    pub(crate) fn notice<C: Category>(&self) -> Option<String> {
        let count = self.count.unwrap_or(0);
        let target = || {
            labels::target_label::<C>(&TargetRef {
                kind: self.kind,
                region: None,
                scope: self.scope.unwrap_or_default(),
                scope_name: None,
                identifier: self.identifier,
            })
        };
        Some(match self.done? {
            Done::Replayed => format!("Replayed {count} dead letter(s)."),
            Done::Discarded => format!("Discarded {count} dead letter(s)."),
            Done::Due => "The shard is due now.".to_owned(),
            Done::Held => "A worker holds the shard right now; retry again in a moment.".to_owned(),
            Done::Paused => format!("Paused {}.", target()),
            Done::Culling => format!("Culling {}.", target()),
            Done::Resumed => format!("Resumed {}.", target()),
            Done::SetAside => format!("Set aside {count} row(s) as dead letters."),
        })
    }
}

fn region() -> Kind {
    Kind::Region
}

/// How many shards and dead letters the page lists.
const PAGE_ROWS: usize = 100;

pub(super) async fn dashboard<C: Category>(
    State(state): State<AdminState<C>>,
    Actor(actor): Actor,
    RawQuery(raw): RawQuery,
) -> Response {
    // Refused in the server's words: the query's own text is not echoed.
    let Ok(query) = serde_urlencoded::from_str::<PageQuery>(raw.as_deref().unwrap_or_default())
    else {
        let error = AdminError::bad_request(
            "this page's address holds a query the dashboard does not write; open the dashboard \
             from its tabs",
        );
        return failed(&error, Kind::Region, "dashboard");
    };
    let minutes = match query.minutes {
        None => page::DEFAULT_MINUTES,
        Some(minutes) if page::RANGES.contains(&minutes) => minutes,
        Some(other) => {
            let error = AdminError::bad_request(format!(
                "`minutes` is one of {:?}, not {other}",
                page::RANGES
            ));
            return (
                error.status,
                Html(page::failure(&error, query.kind, "dashboard").into_string()),
            )
                .into_response();
        }
    };
    match page::Data::read(&state, &actor, query.kind, minutes, PAGE_ROWS).await {
        Ok(data) => Html(page::dashboard(&data, query.notice::<C>()).into_string()).into_response(),
        Err(error) => (
            error.status,
            Html(page::failure(&error, query.kind, "dashboard").into_string()),
        )
            .into_response(),
    }
}

/// A page's form, its fields in order (`ids` repeats).
#[derive(Debug, Default)]
struct Fields(Vec<(String, String)>);

impl Fields {
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, value)| key == name && !value.is_empty())
            .map(|(_, value)| value.as_str())
    }

    fn kind(&self) -> Result<Kind, AdminError> {
        match self.get("kind") {
            Some("region") => Ok(Kind::Region),
            Some("control") => Ok(Kind::Control),
            other => Err(AdminError::bad_request(format!(
                "`kind` is `region` or `control`, not {other:?}"
            ))),
        }
    }

    fn number<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, AdminError> {
        self.get(name)
            .map(|value| {
                value.trim().parse().map_err(|_| {
                    AdminError::bad_request(format!("`{name}` is not a number: {value:?}"))
                })
            })
            .transpose()
    }

    fn target(&self) -> Result<TargetRef, AdminError> {
        Ok(TargetRef {
            kind: self.kind()?,
            region: self.get("region").map(str::to_owned),
            scope: self
                .number("scope")?
                .ok_or_else(|| AdminError::bad_request("`scope` is required"))?,
            scope_name: None,
            identifier: self.number("identifier")?,
        })
    }

    fn shard(&self) -> Result<ShardRef, AdminError> {
        self.target()?
            .shard()
            .ok_or_else(|| AdminError::bad_request("`identifier` is required"))
    }

    fn ids(&self) -> Result<Vec<i64>, AdminError> {
        self.0
            .iter()
            .filter(|(key, _)| key == "ids")
            .map(|(_, value)| {
                value.trim().parse().map_err(|_| {
                    AdminError::bad_request(format!(
                        "a dead letter's id is a number, not {value:?}"
                    ))
                })
            })
            .collect()
    }
}

/// `POST /actions/{action}`: does it, then `303` back to the page, which
/// says what was done; or the page of what was wrong, with its status.
pub(super) async fn act<C: Category>(
    State(state): State<AdminState<C>>,
    Actor(actor): Actor,
    Path(action): Path<String>,
    form: Result<Form<Vec<(String, String)>>, axum::extract::rejection::FormRejection>,
) -> Response {
    let fields = match form {
        Ok(Form(fields)) => Fields(fields),
        Err(rejection) => {
            return failed(
                &AdminError::bad_request(rejection.body_text()),
                Kind::Region,
                "../dashboard",
            )
        }
    };
    let kind = fields.kind().unwrap_or(Kind::Region);
    match perform(&state, &actor, &action, &fields).await {
        Ok(done) => {
            let query =
                serde_urlencoded::to_string(&PageQuery { kind, ..done }).unwrap_or_default();
            see_other(&format!("../dashboard?{query}"))
        }
        Err(error) => failed(&error, kind, "../dashboard"),
    }
}

/// The page that says what was wrong, with the error's status, and a link
/// to `dashboard` (the page's address from the route that failed).
fn failed(error: &AdminError, kind: Kind, dashboard: &str) -> Response {
    (
        error.status,
        Html(page::failure(error, kind, dashboard).into_string()),
    )
        .into_response()
}

/// Does `action`; what the page's query says of it.
async fn perform<C: Category>(
    state: &AdminState<C>,
    actor: &Principal,
    action: &str,
    fields: &Fields,
) -> Result<PageQuery, AdminError> {
    let kind = fields.kind()?;
    let counted = |done, count: usize| PageQuery {
        done: Some(done),
        count: Some(count as u64),
        ..PageQuery::default()
    };
    let on = |done, target: &TargetRef| PageQuery {
        done: Some(done),
        scope: Some(target.scope),
        identifier: target.identifier,
        ..PageQuery::default()
    };
    match action {
        "replay" => {
            let replayed = ops::replay(state, actor, kind, &fields.ids()?).await?;
            Ok(counted(Done::Replayed, replayed as usize))
        }
        "discard" => {
            let discarded = ops::discard(state, actor, kind, &fields.ids()?).await?;
            Ok(counted(Done::Discarded, discarded as usize))
        }
        "retry" => {
            let shard = fields.shard()?;
            let retried = ops::retry(state, actor, vec![shard.key::<C>()?]).await?;
            let done = if retried.held.is_empty() {
                Done::Due
            } else {
                Done::Held
            };
            Ok(counted(done, 1))
        }
        "pause" | "cull" => {
            let (action, done) = if action == "pause" {
                (ControlAction::Pause, Done::Paused)
            } else {
                (ControlAction::Cull, Done::Culling)
            };
            let target = fields.target()?;
            let reason = fields.get("reason").map(str::to_owned);
            ops::set_control(state, actor, target.target::<C>()?, action, reason).await?;
            Ok(on(done, &target))
        }
        "set-aside" => {
            let shard = fields.shard()?;
            let reason = fields.get("reason").map(str::to_owned);
            let ids = ops::set_aside(state, actor, shard.key::<C>()?, reason).await?;
            Ok(counted(Done::SetAside, ids.len()))
        }
        "resume" => {
            let target = fields.target()?;
            ops::lift_control(state, actor, &target.target::<C>()?).await?;
            Ok(on(Done::Resumed, &target))
        }
        _ => Err(AdminError::not_found(
            "unknown_action",
            format!("no action {action:?}"),
        )),
    }
}

fn see_other(location: &str) -> Response {
    match HeaderValue::from_str(location) {
        Ok(location) => (StatusCode::SEE_OTHER, [(LOCATION, location)]).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

pub(super) async fn login_form() -> Html<String> {
    Html(page::login(None).into_string())
}

#[derive(Debug, Deserialize)]
pub(super) struct Login {
    token: String,
}

/// `POST /login`: a session cookie (never the token), scoped to where the
/// router is mounted (or `__Host-` and `Secure` behind TLS), for the
/// session's lifetime. Wrong tokens count against the client's allowance.
pub(super) async fn login<A: Authorize>(State(gate): State<Gate<A>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let client = match gate.client(&parts) {
        Ok(client) => client,
        Err(refused) => return refused_page(refused),
    };
    let mount = mount_path(&parts);
    if let Err(after) = gate.throttle.check(client) {
        let mut response = throttled(after);
        *response.body_mut() = axum::body::Body::from(
            page::login(Some("Too many wrong tokens from here; wait a minute.")).into_string(),
        );
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        return response;
    }
    let form = match Form::<Login>::from_request(Request::from_parts(parts, body), &()).await {
        Ok(Form(login)) => login,
        Err(rejection) => {
            return (
                StatusCode::BAD_REQUEST,
                Html(page::login(Some(&rejection.body_text())).into_string()),
            )
                .into_response()
        }
    };
    let Some(session) = gate.authorize.login(&form.token) else {
        gate.throttle.failed(client);
        return (
            StatusCode::UNAUTHORIZED,
            Html(page::login(Some("That is not an admin token.")).into_string()),
        )
            .into_response();
    };
    let (name, attributes) = gate.cookie(&mount);
    let cookie = format!(
        "{name}={}; {attributes}; Max-Age={}",
        session.value,
        session.lifetime.as_secs()
    );
    tracing::info!(
        principal = session.principal.name(),
        role = session.principal.role().as_str(),
        "outbox dashboard: logged in"
    );
    with_cookie(see_other("dashboard"), &cookie)
}

/// `POST /logout`: the session ends (refused from now on, a copy of the
/// cookie too) and the browser forgets it. Only a request the authoriser
/// lets in ends anything ([`Authorize::logout`]); forged or expired
/// sessions count against the client's allowance, as on any other route.
pub(super) async fn logout<A: Authorize>(
    State(gate): State<Gate<A>>,
    request: Request,
) -> Response {
    let (parts, _) = request.into_parts();
    let mut response = match gate.admit(&parts) {
        Ok(_) => {
            gate.authorize.logout(&parts);
            see_other("login")
        }
        Err(Refused::Unauthorized) => see_other("login"),
        Err(refused) => refused_page(refused),
    };
    let (name, attributes) = gate.cookie(&mount_path(&parts));
    if let Ok(value) = HeaderValue::from_str(&format!("{name}=; {attributes}; Max-Age=0")) {
        response.headers_mut().insert(SET_COOKIE, value);
    }
    response
}

/// A refusal other than wrong credentials, as a page.
fn refused_page(refused: Refused) -> Response {
    match refused {
        Refused::NoClientAddress(missing) => {
            failed(&no_client_address(&missing), Kind::Region, "dashboard")
        }
        Refused::Throttled(after) => throttled(after),
        Refused::Unauthorized => failed(&AdminError::unauthorized(), Kind::Region, "dashboard"),
    }
}

fn with_cookie(mut response: Response, cookie: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().insert(SET_COOKIE, value);
    }
    response
}

/// Where the router is mounted, as the application nested it
/// (`Router::nest("/admin/outbox", ..)`), never from the request's path:
/// `/` when it was not nested, or nested under a path with parameters.
fn mount_path(parts: &Parts) -> String {
    match parts.extensions.get::<NestedPath>().map(NestedPath::as_str) {
        Some(path) if path.starts_with('/') && !path.contains(['{', '}', '*']) => {
            match path.trim_end_matches('/') {
                "" => "/".to_owned(),
                trimmed => trimmed.to_owned(),
            }
        }
        _ => "/".to_owned(),
    }
}

/// The page and its forms behind the authoriser: a browser without a
/// valid session (none, expired, ended) is sent to the login form (or
/// refused, for a form).
pub(super) async fn check_page<A: Authorize>(
    State(gate): State<Gate<A>>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    match gate.admit(&parts) {
        Ok(principal) => {
            parts.extensions.insert(principal);
            return next.run(Request::from_parts(parts, body)).await;
        }
        Err(Refused::Unauthorized) => {}
        Err(refused) => return refused_page(refused),
    }
    if parts.method == Method::GET {
        see_other("login")
    } else {
        (
            StatusCode::UNAUTHORIZED,
            Html(page::login(Some("Log in first.")).into_string()),
        )
            .into_response()
    }
}

/// Refuses forms that the browser says come from another origin (the way
/// Go's `CrossOriginProtection` does): `Sec-Fetch-Site` other than
/// `same-origin` or `none`, or, from browsers that do not send it, an
/// `Origin` whose host is not the request's `Host`.
pub(super) async fn same_origin(request: Request, next: Next) -> Response {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let headers = request.headers();
        let foreign = match headers.get("sec-fetch-site") {
            Some(site) => site != "same-origin" && site != "none",
            None => match (headers.get(ORIGIN), headers.get(HOST)) {
                (Some(origin), Some(host)) => {
                    let origin = origin.to_str().unwrap_or("");
                    let authority = origin
                        .split_once("://")
                        .map_or(origin, |(_, authority)| authority);
                    authority.as_bytes() != host.as_bytes()
                }
                (Some(_), None) => true,
                (None, _) => false,
            },
        };
        if foreign {
            return AdminError::new(
                StatusCode::FORBIDDEN,
                "cross_origin",
                "this form comes from another origin",
            )
            .into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_cookie_is_scoped_to_the_mount_not_the_request_path() {
        use tower::ServiceExt;
        let path = |router: axum::Router, uri: &'static str| async move {
            let request = axum::http::Request::builder()
                .uri(uri)
                .body(axum::body::Body::empty())
                .unwrap();
            let response = router.oneshot(request).await.unwrap();
            assert_eq!(response.status(), axum::http::StatusCode::OK, "{uri}");
            let body = axum::body::to_bytes(response.into_body(), 1024)
                .await
                .unwrap();
            String::from_utf8(body.to_vec()).unwrap()
        };
        let echo = || {
            axum::Router::new().route(
                "/login",
                axum::routing::get(|request: Request| async move {
                    mount_path(&request.into_parts().0)
                }),
            )
        };
        let nested = axum::Router::new().nest("/admin/outbox", echo());
        assert_eq!(path(nested, "/admin/outbox/login").await, "/admin/outbox");
        assert_eq!(path(echo(), "/login").await, "/");
        let with_parameter = axum::Router::new().nest("/{tenant}/admin", echo());
        assert_eq!(path(with_parameter, "/acme/admin/login").await, "/");
    }

    outbox_core::registry! {
        OrganizationScope = 0 {
            OrganizationUpdate = 1,
        }
    }

    #[test]
    fn notices_are_worded_by_the_server_from_numbers_only() {
        let query: PageQuery =
            serde_urlencoded::from_str("kind=control&done=replayed&count=3").unwrap();
        assert_eq!(
            query.notice::<OutboxCategory>().as_deref(),
            Some("Replayed 3 dead letter(s).")
        );
        let query: PageQuery =
            serde_urlencoded::from_str("done=paused&scope=0&identifier=42").unwrap();
        assert_eq!(
            query.notice::<OutboxCategory>().as_deref(),
            Some("Paused region-outbox shard OrganizationScope (0) 42.")
        );
        for forged in [
            "done=Hello%2C+operator%21",
            "done=replayed&error=call+this+number",
            "done=replayed&count=three",
        ] {
            assert!(
                serde_urlencoded::from_str::<PageQuery>(forged).is_err(),
                "{forged}"
            );
        }
    }

    #[test]
    fn forms_are_read_field_by_field() {
        let fields = Fields(vec![
            ("kind".into(), "control".into()),
            ("region".into(), String::new()),
            ("scope".into(), " 3".into()),
            ("ids".into(), "1".into()),
            ("ids".into(), "2".into()),
        ]);
        assert_eq!(fields.kind().unwrap(), Kind::Control);
        let target = fields.target().unwrap();
        assert_eq!(
            (target.region, target.scope, target.identifier),
            (None, 3, None)
        );
        assert_eq!(fields.ids().unwrap(), vec![1, 2]);
        let bad = Fields(vec![
            ("kind".into(), "x".into()),
            ("ids".into(), "one".into()),
        ]);
        assert_eq!(bad.kind().unwrap_err().status, StatusCode::BAD_REQUEST);
        assert_eq!(bad.ids().unwrap_err().status, StatusCode::BAD_REQUEST);
    }
}
