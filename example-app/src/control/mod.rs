//! The control silo: users live here and are replicated to the regions where
//! they are members; organizations, memberships and audit events arrive from
//! the regions.

pub mod entities;
mod handlers;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use outbox_core::{HandlerError, Receivers};
use outbox_seaorm::replication::{ControlReplication, ReplicationReceivers};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, Statement};

use crate::registry::OutboxCategory;
use crate::rpc::RpcClient;
pub use handlers::{routes, ControlState};

/// The handlers' state of the control silo.
pub fn handlers_state(db: DatabaseConnection, tokens: crate::api_auth::ApiTokens) -> ControlState {
    ControlState { db, tokens }
}

use entities::users;

/// What Control's receivers need: how to reach each region.
#[derive(Debug)]
pub struct ControlContext {
    /// Region name → its RPC.
    pub regions: BTreeMap<String, RpcClient>,
}

impl ControlContext {
    fn region(&self, name: &str) -> Result<&RpcClient, HandlerError> {
        self.regions
            .get(name)
            // Configuration, not a passing fault: quarantine, not retry.
            .ok_or_else(|| outbox_core::permanent(format!("no address known for region {name:?}")))
    }
}

#[async_trait]
impl ControlReplication for users::Model {
    /// The regions of the organizations the user is a member of.
    async fn outbox_region_names<C: ConnectionTrait>(&self, db: &C) -> Result<Vec<String>, DbErr> {
        let backend = db.get_database_backend();
        let rows = db
            .query_all_raw(Statement::from_sql_and_values(
                backend,
                "SELECT DISTINCT region FROM member_mapping WHERE user_id = $1 ORDER BY region",
                [self.id.into()],
            ))
            .await?;
        rows.iter().map(|row| row.try_get("", "region")).collect()
    }

    async fn handle_async_replication(
        &self,
        context: &ControlContext,
        region: &str,
        _shard: i64,
    ) -> Result<(), HandlerError> {
        let body = serde_json::json!({ "email": self.email, "name": self.name });
        context
            .region(region)?
            .put(&format!("/rpc/users/{}", self.id), &body)
            .await?;
        Ok(())
    }

    async fn handle_async_deletion(
        context: &ControlContext,
        region: &str,
        identifier: i64,
        _shard: i64,
        _payload: Option<serde_json::Value>,
    ) -> Result<(), HandlerError> {
        context
            .region(region)?
            .delete(&format!("/rpc/users/{identifier}"))
            .await?;
        Ok(())
    }
}

/// Control's receivers: users, toward the regions.
pub fn receivers(
    db: &DatabaseConnection,
    context: Arc<ControlContext>,
) -> Receivers<OutboxCategory> {
    Receivers::new()
        .replicate::<users::Model>(db.clone(), context)
        // Written by regions, delivered by regions' drains.
        .discard(OutboxCategory::OrganizationUpdate)
        .discard(OutboxCategory::OrganizationMemberUpdate)
        .discard(OutboxCategory::AuditLogEvent)
}
