//! The dashboard: server-rendered HTML over the same operations as the JSON
//! API, with plain forms (no JavaScript needed).
//!
//! | route | what |
//! |---|---|
//! | `GET /dashboard?kind=region` | the page: health, failing shards first with their last error, the deepest shards with their lag, scopes and controls, dead letters, backfills |
//! | `GET /login`, `POST /login` | the token form ([`Authorize::login`]): a session in an `HttpOnly`, `SameSite=Strict` cookie (never the token), expiring |
//! | `POST /logout` | ends the session ([`Authorize::logout`]) and forgets the cookie |
//! | `POST /actions/{replay,discard,retry,pause,cull,resume,set-aside}` | a form's action; answers `303` back to the page with what was done or what was wrong |
//!
//! Forms are refused (`403`) when the browser says they come from another
//! site (`Origin`, `Sec-Fetch-Site`), and when the principal is a
//! [viewer](super::Role::Viewer), who sees the page without its forms.

mod page;

pub(crate) use page::target_label;

use axum::extract::{Form, FromRequest, OriginalUri, Path, Request, State};
use axum::http::header::{CONTENT_TYPE, HOST, LOCATION, ORIGIN, SET_COOKIE};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use serde::{Deserialize, Serialize};

use outbox_core::{Category, ControlAction};

use super::auth::{Authorize, Principal};
use super::error::{AdminError, AdminQuery};
use super::gate::{throttled, Gate, Refused};
use super::model::{Kind, ShardRef, TargetRef};
use super::ops::Actor;
use super::throttle::Throttle;
use super::{ops, AdminState};

/// `?kind=region&done=...&error=...`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PageQuery {
    #[serde(default = "region")]
    kind: Kind,
    /// What the last form did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    done: Option<String>,
    /// What was wrong with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// How far back the history charts go, in minutes (60, 360 or 1440).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    minutes: Option<u32>,
}

fn region() -> Kind {
    Kind::Region
}

/// How many shards and dead letters the page lists.
const PAGE_ROWS: usize = 100;

pub(super) async fn dashboard<C: Category>(
    State(state): State<AdminState<C>>,
    Actor(actor): Actor,
    AdminQuery(query): AdminQuery<PageQuery>,
) -> Response {
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
                Html(page::failure(&error, query.kind).into_string()),
            )
                .into_response();
        }
    };
    match page::Data::read(&state, &actor, query.kind, minutes, PAGE_ROWS).await {
        Ok(data) => Html(page::dashboard(&data, &query).into_string()).into_response(),
        Err(error) => (
            error.status,
            Html(page::failure(&error, query.kind).into_string()),
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

/// `POST /actions/{action}`: does it, then `303` back to the page.
pub(super) async fn act<C: Category>(
    State(state): State<AdminState<C>>,
    Actor(actor): Actor,
    Path(action): Path<String>,
    form: Result<Form<Vec<(String, String)>>, axum::extract::rejection::FormRejection>,
) -> Response {
    let fields = match form {
        Ok(Form(fields)) => Fields(fields),
        Err(rejection) => {
            return back(
                Kind::Region,
                Err(AdminError::bad_request(rejection.body_text())),
            )
        }
    };
    let kind = fields.kind().unwrap_or(Kind::Region);
    back(kind, perform(&state, &actor, &action, &fields).await)
}

async fn perform<C: Category>(
    state: &AdminState<C>,
    actor: &Principal,
    action: &str,
    fields: &Fields,
) -> Result<String, AdminError> {
    let kind = fields.kind()?;
    match action {
        "replay" => {
            let replayed = ops::replay(state, actor, kind, &fields.ids()?).await?;
            Ok(format!("Replayed {replayed} dead letter(s)."))
        }
        "discard" => {
            let discarded = ops::discard(state, actor, kind, &fields.ids()?).await?;
            Ok(format!("Discarded {discarded} dead letter(s)."))
        }
        "retry" => {
            let shard = fields.shard()?;
            let retried = ops::retry(state, actor, vec![shard.key::<C>()?]).await?;
            Ok(if retried.held.is_empty() {
                "The shard is due now.".to_owned()
            } else {
                "A worker holds the shard right now; retry again in a moment.".to_owned()
            })
        }
        "pause" | "cull" => {
            let action = if action == "pause" {
                ControlAction::Pause
            } else {
                ControlAction::Cull
            };
            let target = fields.target()?.target::<C>()?;
            let reason = fields.get("reason").map(str::to_owned);
            let control = ops::set_control(state, actor, target, action, reason).await?;
            Ok(format!(
                "{} {}.",
                if action == ControlAction::Pause {
                    "Paused"
                } else {
                    "Culling"
                },
                page::target_label::<C>(&control.target)
            ))
        }
        "set-aside" => {
            let shard = fields.shard()?;
            let reason = fields.get("reason").map(str::to_owned);
            let ids = ops::set_aside(state, actor, shard.key::<C>()?, reason).await?;
            Ok(format!(
                "Set aside {} row(s) as dead letters: {}.",
                ids.len(),
                ids.iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
        "resume" => {
            let target = fields.target()?;
            ops::lift_control(state, actor, &target.target::<C>()?).await?;
            Ok(format!("Resumed {}.", page::target_label::<C>(&target)))
        }
        _ => Err(AdminError::not_found(
            "unknown_action",
            format!("no action {action:?}"),
        )),
    }
}

/// `303` to the page (from `/actions/...`), saying what happened.
fn back(kind: Kind, outcome: Result<String, AdminError>) -> Response {
    let query = match outcome {
        Ok(done) => PageQuery {
            kind,
            done: Some(done),
            error: None,
            minutes: None,
        },
        Err(error) => PageQuery {
            kind,
            done: None,
            error: Some(error.message),
            minutes: None,
        },
    };
    let query = serde_urlencoded::to_string(&query).unwrap_or_default();
    see_other(&format!("../dashboard?{query}"))
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
pub(super) async fn login<A: Authorize>(
    State(gate): State<Gate<A>>,
    OriginalUri(uri): OriginalUri,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let client = Throttle::client(&parts);
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
    let (name, attributes) = gate.cookie(&mount_path(uri.path(), "/login"));
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
/// cookie too) and the browser forgets it.
pub(super) async fn logout<A: Authorize>(
    State(gate): State<Gate<A>>,
    OriginalUri(uri): OriginalUri,
    request: Request,
) -> Response {
    let (parts, _) = request.into_parts();
    gate.authorize.logout(&parts);
    let (name, attributes) = gate.cookie(&mount_path(uri.path(), "/logout"));
    with_cookie(
        see_other("login"),
        &format!("{name}=; {attributes}; Max-Age=0"),
    )
}

fn with_cookie(mut response: Response, cookie: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().insert(SET_COOKIE, value);
    }
    response
}

/// Where the router is mounted: `/admin/outbox` for `/admin/outbox/login`.
fn mount_path(path: &str, route: &str) -> String {
    match path.strip_suffix(route) {
        Some("") | None => "/".to_owned(),
        Some(prefix) => prefix.to_owned(),
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
        Err(Refused::Throttled(after)) => return throttled(after),
        Err(Refused::Unauthorized) => {}
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

    #[test]
    fn the_cookie_is_scoped_to_the_mount_path() {
        assert_eq!(mount_path("/admin/outbox/login", "/login"), "/admin/outbox");
        assert_eq!(mount_path("/login", "/login"), "/");
        assert_eq!(mount_path("/elsewhere", "/login"), "/");
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
