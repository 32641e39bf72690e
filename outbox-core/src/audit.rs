//! The operators' audit log: who did what to the outbox, when, why, and how
//! it ended.
//!
//! Every change an operator makes through the admin API, its dashboard or
//! the CLI (a pause, a cull, a resume, a retry, a dead letter replayed or
//! discarded) is recorded through
//! [`DrainOperator::record`](crate::DrainOperator::record), refused attempts
//! too, and listed by [`DrainView::audit_log`](crate::DrainView::audit_log).
//! Records older than the retention are removed as new ones are written.

use chrono::{DateTime, Utc};

/// How long audit records are kept by default: 30 days.
pub const DEFAULT_RETENTION: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

/// The longest text kept in a field; longer text is cut (on a character
/// boundary) and marked with `…`.
pub const FIELD_MAX: usize = 2000;

/// One operator action, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    /// When it happened.
    pub at: DateTime<Utc>,
    /// Who: the name the admin API's authoriser gave the caller, or the
    /// CLI's `cli:<user>`.
    pub actor: String,
    /// The actor's role (`operator`, `viewer`, `cli`, or what an
    /// authoriser of your own says).
    pub role: String,
    /// What: `pause`, `cull`, `resume`, `retry`, `replay`, `discard`, …
    pub action: String,
    /// On what: a shard, a scope, dead-letter ids.
    pub target: Option<String>,
    /// The reason the operator gave, if any.
    pub reason: Option<String>,
    /// `ok`, or the code of the error that refused or failed it
    /// (`forbidden`, `unknown_shard`, `store_unavailable`, …).
    pub outcome: String,
    /// What it did (`released 2, held 0`), or why it was refused.
    pub detail: Option<String>,
}

impl AuditEntry {
    /// An entry of `action` by `actor` in `role`, now, with outcome `ok`.
    pub fn new(
        at: DateTime<Utc>,
        actor: impl Into<String>,
        role: impl Into<String>,
        action: impl Into<String>,
    ) -> Self {
        Self {
            at,
            actor: actor.into(),
            role: role.into(),
            action: action.into(),
            target: None,
            reason: None,
            outcome: "ok".to_owned(),
            detail: None,
        }
    }

    /// The entry as stores keep it: each field cut to [`FIELD_MAX`]
    /// characters, a NUL (which PostgreSQL's text cannot hold) written as
    /// U+FFFD.
    pub fn bounded(mut self) -> Self {
        for field in [
            &mut self.actor,
            &mut self.role,
            &mut self.action,
            &mut self.outcome,
        ] {
            bound(field);
        }
        for field in [&mut self.target, &mut self.reason, &mut self.detail]
            .into_iter()
            .flatten()
        {
            bound(field);
        }
        self
    }
}

fn bound(text: &mut String) {
    // PostgreSQL's text cannot hold a NUL.
    if text.contains('\0') {
        *text = text.replace('\0', "\u{fffd}");
    }
    if let Some((cut, _)) = text.char_indices().nth(FIELD_MAX) {
        text.truncate(cut);
        text.push('…');
    }
}

/// A stored [`AuditEntry`] with its id (newest first in listings).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditRecord {
    /// Increasing with each record.
    pub id: i64,
    /// The entry.
    pub entry: AuditEntry,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_fields_are_cut_on_a_character_boundary() {
        let mut entry = AuditEntry::new(Utc::now(), "ann", "operator", "pause");
        entry.reason = Some("é".repeat(FIELD_MAX + 5));
        entry.target = Some("short".to_owned());
        let entry = entry.bounded();
        let reason = entry.reason.unwrap();
        assert_eq!(reason.chars().count(), FIELD_MAX + 1);
        assert!(reason.ends_with('…'));
        assert_eq!(entry.target.as_deref(), Some("short"));
    }
}
