//! A region silo: organizations and their members live here; Control gets
//! their mappings and the audit log through the region outbox.

pub mod entities;
mod handlers;

use std::sync::Arc;

use async_trait::async_trait;
use outbox_core::{HandlerError, Message, Receivers};
use outbox_seaorm::replication::{RegionReplication, ReplicationReceivers};
use sea_orm::DatabaseConnection;
use serde::{Deserialize, Serialize};

use crate::contracts::AuditEventV2;
use crate::registry::{outbox_categories, OutboxCategory};
use crate::rpc::RpcClient;
pub use handlers::{routes, RegionState};

/// The handlers' state of a region silo.
pub fn handlers_state(region: String, code: i64, db: DatabaseConnection) -> RegionState {
    RegionState { region, code, db }
}

use entities::{organization, organization_member};

/// What the region's receivers need: who they are and how to reach Control.
#[derive(Debug)]
pub struct RegionContext {
    /// This region's name (`us`, `de`).
    pub region: String,
    /// Control's RPC.
    pub control: RpcClient,
}

/// The body of Control's audit RPC: the event and its place in this
/// region's order.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AuditRecord {
    /// The region.
    pub region: String,
    /// The event's outbox id: increasing in the order events were written.
    pub region_sequence: i64,
    /// The event.
    #[serde(flatten)]
    pub event: AuditEventV2,
}

impl crate::validate::Validate for AuditRecord {
    fn validate(&self) -> Result<(), crate::error::ApiError> {
        use crate::validate;
        validate::region(&self.region)?;
        validate::required("action", &self.event.action, validate::ACTION_MAX)?;
        validate::text("detail", &self.event.detail, validate::DETAIL_MAX)?;
        if let Some(actor) = &self.event.actor {
            validate::required("actor", actor, validate::ACTOR_MAX)?;
        }
        validate::required(
            "occurred_at",
            &self.event.occurred_at,
            validate::TIMESTAMP_MAX,
        )
    }
}

#[async_trait]
impl RegionReplication for organization::Model {
    fn payload_for_update(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({ "slug": self.slug, "name": self.name }))
    }

    async fn handle_async_replication(
        &self,
        context: &RegionContext,
        _shard: i64,
    ) -> Result<(), HandlerError> {
        let body =
            serde_json::json!({ "slug": self.slug, "name": self.name, "region": context.region });
        context
            .control
            .put(&format!("/rpc/organization-mappings/{}", self.id), &body)
            .await?;
        Ok(())
    }

    async fn handle_async_deletion(
        context: &RegionContext,
        identifier: i64,
        _shard: i64,
        _payload: Option<serde_json::Value>,
    ) -> Result<(), HandlerError> {
        context
            .control
            .delete(&format!("/rpc/organization-mappings/{identifier}"))
            .await?;
        Ok(())
    }
}

#[async_trait]
impl RegionReplication for organization_member::Model {
    async fn handle_async_replication(
        &self,
        context: &RegionContext,
        _shard: i64,
    ) -> Result<(), HandlerError> {
        let body = serde_json::json!({
            "organization_id": self.organization_id,
            "user_id": self.user_id,
            "role": self.role,
        });
        context
            .control
            .put(
                &format!("/rpc/member-mappings/{}/{}", context.region, self.id),
                &body,
            )
            .await?;
        Ok(())
    }

    async fn handle_async_deletion(
        context: &RegionContext,
        identifier: i64,
        _shard: i64,
        _payload: Option<serde_json::Value>,
    ) -> Result<(), HandlerError> {
        context
            .control
            .delete(&format!(
                "/rpc/member-mappings/{}/{identifier}",
                context.region
            ))
            .await?;
        Ok(())
    }
}

/// The region's receivers: both replicated models and the audit log.
pub fn receivers(
    db: &DatabaseConnection,
    context: Arc<RegionContext>,
) -> Receivers<OutboxCategory> {
    let audit_context = context.clone();
    Receivers::new()
        .replicate::<organization::Model>(db.clone(), context.clone())
        .replicate::<organization_member::Model>(db.clone(), context)
        // Typed: the event arrives decoded, version 1 upcast; a version this
        // binary does not know parks the shard until the region is upgraded.
        .on_typed(
            outbox_categories::AuditLogEvent,
            move |message: Message<OutboxCategory>, event: AuditEventV2| {
                let context = audit_context.clone();
                async move {
                    let record = AuditRecord {
                        region: context.region.clone(),
                        region_sequence: message.id,
                        event,
                    };
                    context.control.post("/rpc/audit-logs", &record).await?;
                    Ok::<_, HandlerError>(())
                }
            },
        )
        // Users are replicated *to* regions by Control's outbox; a region
        // never writes them.
        .discard(OutboxCategory::UserUpdate)
}
