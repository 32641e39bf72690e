//! The region silo's HTTP API.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get, post, put};
use axum::{middleware, Extension, Json, Router};
use outbox_axum::{OutboxCtx, Tx};
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, QueryFilter,
    Set, Statement,
};
use serde::{Deserialize, Serialize};

use super::entities::{organization, organization_member};
use crate::api_auth::Actor;
use crate::contracts::AuditEventV2;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::registry::outbox_categories;
use crate::validate::{self, Validate};

/// Shared by the region's handlers.
#[derive(Clone, Debug)]
pub struct RegionState {
    /// This region's name.
    pub region: String,
    /// Its code in the ids it allocates (`crate::ids`).
    pub code: i64,
    /// Its database.
    pub db: DatabaseConnection,
}

#[derive(Debug, Deserialize)]
struct NewOrganization {
    slug: String,
    name: String,
}

#[derive(Debug, Deserialize)]
struct OrganizationChange {
    slug: Option<String>,
    name: Option<String>,
}

#[derive(Debug, Serialize)]
struct OrganizationView {
    id: i64,
    slug: String,
    name: String,
    region: String,
}

#[derive(Debug, Deserialize)]
struct NewMember {
    user_id: i64,
    role: String,
}

impl Validate for NewOrganization {
    fn validate(&self) -> Result<(), ApiError> {
        validate::required("slug", &self.slug, validate::SLUG_MAX)?;
        validate::required("name", &self.name, validate::NAME_MAX)
    }
}

impl Validate for OrganizationChange {
    fn validate(&self) -> Result<(), ApiError> {
        if let Some(slug) = &self.slug {
            validate::required("slug", slug, validate::SLUG_MAX)?;
        }
        if let Some(name) = &self.name {
            validate::required("name", name, validate::NAME_MAX)?;
        }
        Ok(())
    }
}

impl Validate for NewMember {
    fn validate(&self) -> Result<(), ApiError> {
        validate::required("role", &self.role, validate::ROLE_MAX)
    }
}

impl Validate for UserReplica {
    fn validate(&self) -> Result<(), ApiError> {
        validate::required("email", &self.email, validate::EMAIL_MAX)?;
        validate::required("name", &self.name, validate::NAME_MAX)
    }
}

/// The public API (`/api/0/...`) and the RPC routes Control calls (`/rpc/...`,
/// signed with Control's key, the one peer in `peers`), without the outbox
/// layer.
pub fn routes(
    state: RegionState,
    peers: crate::rpc::Peers,
    write_limit: &crate::limits::WriteLimit,
) -> Router {
    let rpc = Router::new()
        .route(
            "/rpc/users/{id}",
            put(upsert_user_replica).delete(delete_user_replica),
        )
        // Inside the signature check: each outbox message applied once.
        .route_layer(middleware::from_fn(crate::rpc::apply_once))
        .route_layer(middleware::from_fn_with_state(
            peers,
            crate::rpc::authenticate,
        ));
    let public = Router::new()
        .route("/api/0/organizations", post(create_organization))
        .route(
            "/api/0/organizations/bulk",
            post(create_organizations_in_bulk),
        )
        .route(
            "/api/0/organizations/{id}",
            get(get_organization)
                .put(update_organization)
                .delete(delete_organization),
        )
        .route("/api/0/organizations/{id}/members", post(add_member))
        .route(
            "/api/0/organizations/{id}/members/{member_id}",
            delete(remove_member),
        )
        .route("/api/0/users/{id}", get(get_user_replica));
    // Public writes are rate-limited per client; the RPC routes are signed.
    write_limit.apply(public).merge(rpc).with_state(state)
}

fn view(state: &RegionState, organization: organization::Model) -> OrganizationView {
    OrganizationView {
        id: organization.id,
        slug: organization.slug,
        name: organization.name,
        region: state.region.clone(),
    }
}

/// Who made the request, for its audit events: `None` only for a route
/// mounted without the API's token middleware.
type ActorOf = Option<Extension<Actor>>;

/// Writes an audit event: its own shard and object id, so never coalesced.
/// Typed: the registry's `AuditEventV2`, whose version the row records.
async fn audit(
    tx: &Tx,
    actor: &ActorOf,
    organization_id: i64,
    action: &str,
    detail: String,
) -> Result<(), ApiError> {
    let event_id = (rand::random::<u64>() >> 2) as i64;
    let event = AuditEventV2 {
        organization_id,
        action: action.to_owned(),
        detail,
        occurred_at: chrono::Utc::now().to_rfc3339(),
        actor: actor.as_ref().map(|Extension(actor)| actor.to_string()),
    };
    write_region(
        tx,
        OutboxMessage::typed(
            outbox_categories::AuditLogEvent,
            ShardId(event_id),
            ObjectId(event_id),
            &event,
        )?,
    )
    .await?;
    Ok(())
}

async fn insert_organization(
    state: &RegionState,
    tx: &Tx,
    actor: &ActorOf,
    new: NewOrganization,
) -> Result<organization::Model, ApiError> {
    if new.slug.trim().is_empty() {
        return Err(ApiError::bad_request("slug must not be empty"));
    }
    let organization = organization::ActiveModel {
        id: Set(crate::ids::next_id(tx, "organization", state.code).await?),
        slug: Set(new.slug),
        name: Set(new.name),
    }
    .insert(tx)
    .await?;
    audit(
        tx,
        actor,
        organization.id,
        "organization.create",
        format!("created {}", organization.slug),
    )
    .await?;
    Ok(organization)
}

async fn create_organization(
    State(state): State<RegionState>,
    actor: ActorOf,
    tx: Tx,
    ApiJson(new): ApiJson<NewOrganization>,
) -> Result<(StatusCode, Json<OrganizationView>), ApiError> {
    let organization = insert_organization(&state, &tx, &actor, new).await?;
    Ok((StatusCode::CREATED, Json(view(&state, organization))))
}

/// Many organizations at once, with `flush = false`: their rows reach Control
/// through the background drain.
async fn create_organizations_in_bulk(
    State(state): State<RegionState>,
    context: OutboxCtx,
    actor: ActorOf,
    tx: Tx,
    ApiJson(batch): ApiJson<Vec<NewOrganization>>,
) -> Result<(StatusCode, Json<Vec<OrganizationView>>), ApiError> {
    context.defer_flush();
    let mut created = Vec::with_capacity(batch.len());
    for new in batch {
        created.push(view(
            &state,
            insert_organization(&state, &tx, &actor, new).await?,
        ));
    }
    Ok((StatusCode::ACCEPTED, Json(created)))
}

async fn find_organization(
    db: &impl ConnectionTrait,
    id: i64,
) -> Result<organization::Model, ApiError> {
    organization::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or_else(|| ApiError::not_found("organization"))
}

async fn get_organization(
    State(state): State<RegionState>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<OrganizationView>, ApiError> {
    let organization = find_organization(&state.db, id).await?;
    Ok(Json(view(&state, organization)))
}

async fn update_organization(
    State(state): State<RegionState>,
    actor: ActorOf,
    tx: Tx,
    ApiPath(id): ApiPath<i64>,
    ApiJson(change): ApiJson<OrganizationChange>,
) -> Result<Json<OrganizationView>, ApiError> {
    if change.slug.is_none() && change.name.is_none() {
        return Err(ApiError::bad_request("give `slug` and/or `name`"));
    }
    let existing = find_organization(&tx, id).await?;
    let mut active: organization::ActiveModel = existing.into();
    if let Some(slug) = change.slug {
        active.slug = Set(slug);
    }
    if let Some(name) = change.name {
        active.name = Set(name);
    }
    let organization = active.update(&tx).await?;
    audit(
        &tx,
        &actor,
        id,
        "organization.update",
        format!("now {} ({})", organization.name, organization.slug),
    )
    .await?;
    Ok(Json(view(&state, organization)))
}

async fn delete_organization(
    actor: ActorOf,
    tx: Tx,
    ApiPath(id): ApiPath<i64>,
) -> Result<StatusCode, ApiError> {
    let organization = find_organization(&tx, id).await?;
    let members = organization_member::Entity::find()
        .filter(organization_member::Column::OrganizationId.eq(id))
        .all(&tx)
        .await?;
    for member in members {
        organization_member::ActiveModel::from(member)
            .delete(&tx)
            .await?;
    }
    let slug = organization.slug.clone();
    organization::ActiveModel::from(organization)
        .delete(&tx)
        .await?;
    audit(
        &tx,
        &actor,
        id,
        "organization.delete",
        format!("deleted {slug}"),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn add_member(
    State(state): State<RegionState>,
    actor: ActorOf,
    tx: Tx,
    ApiPath(organization_id): ApiPath<i64>,
    ApiJson(new): ApiJson<NewMember>,
) -> Result<(StatusCode, Json<organization_member::Model>), ApiError> {
    find_organization(&tx, organization_id).await?;
    let member = organization_member::ActiveModel {
        id: Set(crate::ids::next_id(&tx, "organization_member", state.code).await?),
        organization_id: Set(organization_id),
        user_id: Set(new.user_id),
        role: Set(new.role),
    }
    .insert(&tx)
    .await?;
    audit(
        &tx,
        &actor,
        organization_id,
        "member.add",
        format!("user {} as {}", member.user_id, member.role),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(member)))
}

async fn remove_member(
    actor: ActorOf,
    tx: Tx,
    ApiPath((organization_id, member_id)): ApiPath<(i64, i64)>,
) -> Result<StatusCode, ApiError> {
    let member = organization_member::Entity::find_by_id(member_id)
        .one(&tx)
        .await?
        .filter(|member| member.organization_id == organization_id)
        .ok_or_else(|| ApiError::not_found("member"))?;
    let user_id = member.user_id;
    organization_member::ActiveModel::from(member)
        .delete(&tx)
        .await?;
    audit(
        &tx,
        &actor,
        organization_id,
        "member.remove",
        format!("user {user_id}"),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Serialize, Deserialize)]
struct UserReplica {
    email: String,
    name: String,
}

async fn get_user_replica(
    State(state): State<RegionState>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let backend = state.db.get_database_backend();
    let row = state
        .db
        .query_one_raw(Statement::from_sql_and_values(
            backend,
            "SELECT email, name FROM user_replica WHERE id = $1",
            [id.into()],
        ))
        .await?
        .ok_or_else(|| ApiError::not_found("user"))?;
    let email: String = row.try_get("", "email")?;
    let name: String = row.try_get("", "name")?;
    Ok(Json(
        serde_json::json!({ "id": id, "email": email, "name": name }),
    ))
}

/// A user from Control: stored only if a member of this region names them
/// (Control replicates a user to the regions its member mappings name).
/// Otherwise answered 204 with nothing written: a membership removed while
/// the user's replication was on its way is not an error to retry.
async fn upsert_user_replica(
    tx: Tx,
    ApiPath(id): ApiPath<i64>,
    ApiJson(user): ApiJson<UserReplica>,
) -> Result<StatusCode, ApiError> {
    let named = organization_member::Entity::find()
        .filter(organization_member::Column::UserId.eq(id))
        .one(&tx)
        .await?
        .is_some();
    if !named {
        tracing::info!(
            user_id = id,
            "rpc: a user no member of this region names, not stored"
        );
        return Ok(StatusCode::NO_CONTENT);
    }
    let backend = tx.get_database_backend();
    tx.execute_raw(Statement::from_sql_and_values(
        backend,
        "INSERT INTO user_replica (id, email, name) VALUES ($1, $2, $3) \
         ON CONFLICT (id) DO UPDATE SET email = excluded.email, name = excluded.name",
        [id.into(), user.email.into(), user.name.into()],
    ))
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete_user_replica(tx: Tx, ApiPath(id): ApiPath<i64>) -> Result<StatusCode, ApiError> {
    let backend = tx.get_database_backend();
    tx.execute_raw(Statement::from_sql_and_values(
        backend,
        "DELETE FROM user_replica WHERE id = $1",
        [id.into()],
    ))
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
