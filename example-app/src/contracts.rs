//! The payload types of the demo's typed categories, each a versioned
//! [`Contract`]: what the registry names with `(payload = ...)`, what
//! writers build and typed receivers get.

use outbox_core::contract::Upcasts;
use outbox_core::schemars::JsonSchema;
use outbox_core::Contract;
use serde::{Deserialize, Serialize};

/// An audit event as the first producers wrote it (and every untyped row
/// from before the category was typed, read as version 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "outbox_core::schemars")]
pub struct AuditEventV1 {
    /// The organization concerned.
    pub organization_id: i64,
    /// What happened (`organization.create`, ...).
    pub action: String,
    /// Details for humans.
    pub detail: String,
    /// When, RFC 3339.
    pub occurred_at: String,
}

impl Contract for AuditEventV1 {
    const VERSION: u32 = 1;
}

/// An audit event, sent to Control as-is: the registry's payload of
/// `AuditLogEvent`. Version 2 says who did it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "outbox_core::schemars")]
pub struct AuditEventV2 {
    /// The organization concerned.
    pub organization_id: i64,
    /// What happened (`organization.create`, ...).
    pub action: String,
    /// Details for humans.
    pub detail: String,
    /// When, RFC 3339.
    pub occurred_at: String,
    /// Who did it (`admin`, `user_42`); `None` for a version-1 event, written
    /// before producers knew.
    pub actor: Option<String>,
}

impl From<AuditEventV1> for AuditEventV2 {
    fn from(v1: AuditEventV1) -> Self {
        Self {
            organization_id: v1.organization_id,
            action: v1.action,
            detail: v1.detail,
            occurred_at: v1.occurred_at,
            actor: None,
        }
    }
}

impl Contract for AuditEventV2 {
    const VERSION: u32 = 2;
    fn older() -> Upcasts<Self> {
        Upcasts::from::<AuditEventV1>()
    }
}
