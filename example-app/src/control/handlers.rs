//! The control silo's HTTP API and the RPC routes regions call.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post, put};
use axum::{middleware, Json, Router};
use outbox_axum::Tx;
use outbox_seaorm::replication::replicate_to_regions;
use sea_orm::{ActiveModelTrait, ConnectionTrait, DatabaseConnection, EntityTrait, Set, Statement};
use serde::{Deserialize, Serialize};

use super::entities::users;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::region::AuditRecord;
use crate::rpc::Caller;
use crate::validate::{self, Validate};

/// Shared by Control's handlers.
#[derive(Clone, Debug)]
pub struct ControlState {
    /// Its database.
    pub db: DatabaseConnection,
    /// Issues the public API's user tokens.
    pub tokens: crate::api_auth::ApiTokens,
}

#[derive(Debug, Deserialize)]
struct NewUser {
    email: String,
    name: String,
}

#[derive(Debug, Deserialize)]
struct UserChange {
    email: Option<String>,
    name: Option<String>,
}

#[derive(Debug, Deserialize, Serialize)]
struct Mapping {
    slug: String,
    name: String,
    region: String,
}

#[derive(Debug, Deserialize)]
struct MemberMapping {
    organization_id: i64,
    user_id: i64,
    role: String,
}

impl Validate for NewUser {
    fn validate(&self) -> Result<(), ApiError> {
        validate::required("email", &self.email, validate::EMAIL_MAX)?;
        validate::required("name", &self.name, validate::NAME_MAX)
    }
}

impl Validate for UserChange {
    fn validate(&self) -> Result<(), ApiError> {
        if let Some(email) = &self.email {
            validate::required("email", email, validate::EMAIL_MAX)?;
        }
        if let Some(name) = &self.name {
            validate::required("name", name, validate::NAME_MAX)?;
        }
        Ok(())
    }
}

impl Validate for Mapping {
    fn validate(&self) -> Result<(), ApiError> {
        validate::required("slug", &self.slug, validate::SLUG_MAX)?;
        validate::required("name", &self.name, validate::NAME_MAX)?;
        validate::region(&self.region)
    }
}

impl Validate for MemberMapping {
    fn validate(&self) -> Result<(), ApiError> {
        validate::required("role", &self.role, validate::ROLE_MAX)
    }
}

#[derive(Debug, Deserialize)]
struct SlugQuery {
    slug: Option<String>,
}

#[derive(Debug, Deserialize)]
struct AuditQuery {
    organization_id: i64,
}

/// The public API and the RPC routes (calls signed by the regions in
/// `peers`, each writing its own rows only), without the outbox layer.
pub fn routes(
    state: ControlState,
    peers: crate::rpc::Peers,
    write_limit: &crate::limits::WriteLimit,
) -> Router {
    let rpc = Router::new()
        .route(
            "/rpc/organization-mappings/{id}",
            put(upsert_mapping).delete(delete_mapping),
        )
        .route(
            "/rpc/member-mappings/{region}/{member_id}",
            put(upsert_member).delete(delete_member),
        )
        .route("/rpc/audit-logs", post(record_audit))
        // Inside the signature check: each outbox message applied once.
        .route_layer(middleware::from_fn(crate::rpc::apply_once))
        .route_layer(middleware::from_fn_with_state(
            peers,
            crate::rpc::authenticate,
        ));
    let public = Router::new()
        .route("/api/0/organization-mappings", get(find_mapping_by_slug))
        .route("/api/0/organization-mappings/{id}", get(get_mapping))
        .route("/api/0/users", post(create_user))
        .route(
            "/api/0/users/{id}",
            get(get_user).put(update_user).delete(delete_user),
        )
        .route("/api/0/users/{id}/tokens", post(issue_token))
        .route("/api/0/audit-logs", get(audit_logs));
    // Public writes are rate-limited per client; the RPC routes are signed.
    write_limit.apply(public).merge(rpc).with_state(state)
}

async fn mapping_where(
    db: &DatabaseConnection,
    condition: &str,
    value: sea_orm::Value,
) -> Result<Json<serde_json::Value>, ApiError> {
    let backend = db.get_database_backend();
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            backend,
            format!("SELECT organization_id, slug, name, region FROM organization_mapping WHERE {condition} = $1"),
            [value],
        ))
        .await?
        .ok_or_else(|| ApiError::not_found("organization mapping"))?;
    let id: i64 = row.try_get("", "organization_id")?;
    let slug: String = row.try_get("", "slug")?;
    let name: String = row.try_get("", "name")?;
    let region: String = row.try_get("", "region")?;
    Ok(Json(
        serde_json::json!({ "id": id, "slug": slug, "name": name, "region": region }),
    ))
}

async fn get_mapping(
    State(state): State<ControlState>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<serde_json::Value>, ApiError> {
    mapping_where(&state.db, "organization_id", id.into()).await
}

async fn find_mapping_by_slug(
    State(state): State<ControlState>,
    ApiQuery(query): ApiQuery<SlugQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let slug = query
        .slug
        .ok_or_else(|| ApiError::bad_request("give ?slug=..."))?;
    validate::required("slug", &slug, validate::SLUG_MAX)?;
    mapping_where(&state.db, "slug", slug.into()).await
}

async fn create_user(
    tx: Tx,
    ApiJson(new): ApiJson<NewUser>,
) -> Result<(StatusCode, Json<users::Model>), ApiError> {
    let user = users::ActiveModel {
        email: Set(new.email),
        name: Set(new.name),
        ..Default::default()
    }
    .insert(&tx)
    .await?;
    Ok((StatusCode::CREATED, Json(user)))
}

async fn find_user(db: &impl ConnectionTrait, id: i64) -> Result<users::Model, ApiError> {
    users::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or_else(|| ApiError::not_found("user"))
}

async fn get_user(
    State(state): State<ControlState>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<users::Model>, ApiError> {
    Ok(Json(find_user(&state.db, id).await?))
}

async fn update_user(
    tx: Tx,
    ApiPath(id): ApiPath<i64>,
    ApiJson(change): ApiJson<UserChange>,
) -> Result<Json<users::Model>, ApiError> {
    let mut active: users::ActiveModel = find_user(&tx, id).await?.into();
    if let Some(email) = change.email {
        active.email = Set(email);
    }
    if let Some(name) = change.name {
        active.name = Set(name);
    }
    Ok(Json(active.update(&tx).await?))
}

async fn delete_user(tx: Tx, ApiPath(id): ApiPath<i64>) -> Result<StatusCode, ApiError> {
    let user = find_user(&tx, id).await?;
    users::ActiveModel::from(user).delete(&tx).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
struct TokenQuery {
    ttl_seconds: Option<u64>,
}

/// A bearer token for user `id` (admin token only, `api_auth`), valid for
/// `?ttl_seconds=` (default 24 h, at most 30 days).
async fn issue_token(
    State(state): State<ControlState>,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(query): ApiQuery<TokenQuery>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    use crate::api_auth::{DEFAULT_TOKEN_TTL, MAX_TOKEN_TTL};
    find_user(&state.db, id).await?;
    let ttl = query
        .ttl_seconds
        .map_or(DEFAULT_TOKEN_TTL, std::time::Duration::from_secs);
    if ttl.is_zero() || ttl > MAX_TOKEN_TTL {
        return Err(ApiError::bad_request(format!(
            "ttl_seconds must be 1 to {}",
            MAX_TOKEN_TTL.as_secs()
        )));
    }
    let expires = chrono::Utc::now().timestamp() + ttl.as_secs() as i64;
    let token = state.tokens.issue(id, expires);
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({ "user_id": id, "token": token, "expires_at": expires })),
    ))
}

async fn audit_logs(
    State(state): State<ControlState>,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> Result<Json<Vec<serde_json::Value>>, ApiError> {
    let backend = state.db.get_database_backend();
    let rows = state
        .db
        .query_all_raw(Statement::from_sql_and_values(
            backend,
            "SELECT region, region_sequence, action, detail, occurred_at, actor FROM audit_log \
             WHERE organization_id = $1 ORDER BY region, region_sequence",
            [query.organization_id.into()],
        ))
        .await?;
    let mut events = Vec::with_capacity(rows.len());
    for row in rows {
        let region: String = row.try_get("", "region")?;
        let sequence: i64 = row.try_get("", "region_sequence")?;
        let action: String = row.try_get("", "action")?;
        let detail: String = row.try_get("", "detail")?;
        let occurred_at: String = row.try_get("", "occurred_at")?;
        let actor: Option<String> = row.try_get("", "actor")?;
        events.push(serde_json::json!({
            "region": region, "sequence": sequence, "action": action,
            "detail": detail, "occurred_at": occurred_at, "actor": actor,
        }));
    }
    Ok(Json(events))
}

// ---- RPC (each message applied once: `rpc::apply_once`) -------------------

/// The region of organization mapping `id`, if there is one. Locked on
/// PostgreSQL until the request's transaction ends.
async fn mapping_region(tx: &Tx, id: i64) -> Result<Option<String>, ApiError> {
    let backend = tx.get_database_backend();
    let lock = match backend {
        sea_orm::DbBackend::Postgres => " FOR UPDATE",
        _ => "",
    };
    let row = tx
        .query_one_raw(Statement::from_sql_and_values(
            backend,
            format!("SELECT region FROM organization_mapping WHERE organization_id = $1{lock}"),
            [id.into()],
        ))
        .await?;
    Ok(match row {
        Some(row) => Some(row.try_get("", "region")?),
        None => None,
    })
}

/// Refuses (403) unless organization `id` is the caller's: its mapping's
/// region if Control holds one (a mapping stays its region's), else the
/// region whose stripe the id is in (a region registers only ids it
/// allocated: none could register another's first and have the other's
/// own call refused).
async fn must_own_organization(tx: &Tx, caller: &Caller, id: i64) -> Result<(), ApiError> {
    match mapping_region(tx, id).await? {
        Some(region) => caller.must_be_region(&region),
        None => caller.must_own_id("organization", id),
    }
}

/// A region's organization: the caller must be that region, and the
/// organization the caller's ([`must_own_organization`]; 403 otherwise).
async fn upsert_mapping(
    tx: Tx,
    caller: Caller,
    ApiPath(id): ApiPath<i64>,
    ApiJson(mapping): ApiJson<Mapping>,
) -> Result<StatusCode, ApiError> {
    caller.must_be_region(&mapping.region)?;
    must_own_organization(&tx, &caller, id).await?;
    let backend = tx.get_database_backend();
    tx.execute_raw(Statement::from_sql_and_values(
        backend,
        "INSERT INTO organization_mapping (organization_id, slug, name, region) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (organization_id) DO UPDATE SET slug = excluded.slug, name = excluded.name, region = excluded.region",
        [id.into(), mapping.slug.into(), mapping.name.into(), mapping.region.into()],
    ))
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete_mapping(
    tx: Tx,
    caller: Caller,
    ApiPath(id): ApiPath<i64>,
) -> Result<StatusCode, ApiError> {
    if let Some(region) = mapping_region(&tx, id).await? {
        caller.must_be_region(&region)?;
    }
    let backend = tx.get_database_backend();
    tx.execute_raw(Statement::from_sql_and_values(
        backend,
        "DELETE FROM organization_mapping WHERE organization_id = $1",
        [id.into()],
    ))
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A membership arrived: record it, and replicate the user to that region
/// (in the same transaction, so the user follows the membership). The
/// caller must be that region, the organization the caller's, and a new
/// membership's id of the caller's stripe (403 otherwise).
async fn upsert_member(
    tx: Tx,
    caller: Caller,
    ApiPath((region, member_id)): ApiPath<(String, i64)>,
    ApiJson(member): ApiJson<MemberMapping>,
) -> Result<StatusCode, ApiError> {
    // Before anything is written: a user replicated to an unknown region
    // would be an outbox row that can never be delivered.
    validate::region(&region)?;
    // The user is replicated to the region the mapping names: only that
    // region may name itself.
    caller.must_be_region(&region)?;
    // A region's members are of its own organizations, under ids it
    // allocated.
    must_own_organization(&tx, &caller, member.organization_id).await?;
    let backend = tx.get_database_backend();
    let known = tx
        .query_one_raw(Statement::from_sql_and_values(
            backend,
            "SELECT member_id FROM member_mapping WHERE region = $1 AND member_id = $2",
            [region.clone().into(), member_id.into()],
        ))
        .await?;
    if known.is_none() {
        caller.must_own_id("membership", member_id)?;
    }
    tx.execute_raw(Statement::from_sql_and_values(
        backend,
        "INSERT INTO member_mapping (region, member_id, organization_id, user_id, role) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (region, member_id) DO UPDATE SET organization_id = excluded.organization_id, \
         user_id = excluded.user_id, role = excluded.role",
        [region.clone().into(), member_id.into(), member.organization_id.into(), member.user_id.into(), member.role.into()],
    ))
    .await?;
    // Locks the user against a save at the same time: without it, a save
    // that read the user's regions before this commits, and a delivery of
    // this row that read the user before the save commits, would both
    // leave the region with the user from before the save.
    replicate_to_regions::<users::Model, _>(&tx, member.user_id, [region]).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete_member(
    tx: Tx,
    caller: Caller,
    ApiPath((region, member_id)): ApiPath<(String, i64)>,
) -> Result<StatusCode, ApiError> {
    validate::region(&region)?;
    caller.must_be_region(&region)?;
    let backend = tx.get_database_backend();
    tx.execute_raw(Statement::from_sql_and_values(
        backend,
        "DELETE FROM member_mapping WHERE region = $1 AND member_id = $2",
        [region.into(), member_id.into()],
    ))
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A region's audit event: only that region may write its rows (another
/// could take their places in its order, and the real ones be dropped).
async fn record_audit(
    tx: Tx,
    caller: Caller,
    ApiJson(record): ApiJson<AuditRecord>,
) -> Result<StatusCode, ApiError> {
    caller.must_be_region(&record.region)?;
    let backend = tx.get_database_backend();
    tx.execute_raw(Statement::from_sql_and_values(
        backend,
        "INSERT INTO audit_log (region, region_sequence, organization_id, action, detail, occurred_at, actor) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (region, region_sequence) DO NOTHING",
        [
            record.region.into(),
            record.region_sequence.into(),
            record.event.organization_id.into(),
            record.event.action.into(),
            record.event.detail.into(),
            record.event.occurred_at.into(),
            record.event.actor.into(),
        ],
    ))
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
