outbox_core::registry! {
    /// Organization data.
    OrganizationScope = 0 (shard_field = "organization_id") {
        /// Changed.
        OrganizationUpdate = 1,
        OrganizationLegacy = 2 (retired),
    }
    UserScope = 1 (shard_field = "user_id") {
        UserUpdate = 3,
    }
    AuditLogScope = 2 {}
}

fn main() {
    use outbox_core::{Category, Scope};
    assert_eq!(OutboxCategory::UserUpdate.scope(), OutboxScope::UserScope);
    assert!(OutboxCategory::OrganizationLegacy.is_retired());
    assert_eq!(OutboxScope::AuditLogScope.shard_field(), None);
    assert_eq!(OutboxCategory::ALL.len(), 3);
}
