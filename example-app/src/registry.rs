//! The outbox registry of the demo.

outbox_core::registry! {
    /// Data owned by an organization (the organization itself and its
    /// members), sharded by organization id: processed in order per
    /// organization.
    OrganizationScope = 0 (shard_field = "organization_id", owner_table = "organization") {
        /// An organization was created, changed or deleted (region → control).
        OrganizationUpdate = 1,
        /// A membership was created, changed or deleted (region → control).
        OrganizationMemberUpdate = 2,
    }
    /// Users, sharded by user id.
    UserScope = 1 (shard_field = "user_id", owner_table = "users") {
        /// A user was created, changed or deleted (control → regions).
        UserUpdate = 10,
    }
    /// Audit events: payload-only, one shard and one object id per event, so
    /// they are never coalesced and one stuck event blocks no other.
    AuditLogScope = 2 {
        /// Something happened to an organization (region → control). Typed:
        /// its payload is an `AuditEventV2`, which reads version 1 too.
        AuditLogEvent = 20 (payload = crate::contracts::AuditEventV2),
    }
}
