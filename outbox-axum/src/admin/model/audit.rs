//! `GET /audit`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::super::error::AdminError;
use super::query::{check_limit, hundred};

/// One record of the operators' audit log (`GET /audit`), newest first.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditView {
    /// Increasing with each record.
    pub id: i64,
    /// When.
    pub at: DateTime<Utc>,
    /// Who (the principal's name; `cli:<user>` from the CLI).
    pub actor: String,
    /// In which role (`operator`, `viewer`, `cli`).
    pub role: String,
    /// What: `pause`, `cull`, `resume`, `retry`, `replay`, `discard`, or
    /// the method and route a viewer was refused.
    pub action: String,
    /// On what (a shard's or a scope's by name and number:
    /// `region-outbox shard OrganizationScope (0) 65`).
    pub target: Option<String>,
    /// The reason given.
    pub reason: Option<String>,
    /// `ok`, or the error code that refused or failed it.
    pub outcome: String,
    /// What it did, or why it was refused.
    pub detail: Option<String>,
}

impl From<&outbox_core::audit::AuditRecord> for AuditView {
    fn from(record: &outbox_core::audit::AuditRecord) -> Self {
        let entry = &record.entry;
        Self {
            id: record.id,
            at: entry.at,
            actor: entry.actor.clone(),
            role: entry.role.clone(),
            action: entry.action.clone(),
            target: entry.target.clone(),
            reason: entry.reason.clone(),
            outcome: entry.outcome.clone(),
            detail: entry.detail.clone(),
        }
    }
}

/// `?limit=100` of `GET /audit`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditQuery {
    #[serde(default = "hundred")]
    pub(crate) limit: usize,
}

impl AuditQuery {
    pub(crate) fn checked(self) -> Result<usize, AdminError> {
        check_limit(self.limit)
    }
}
