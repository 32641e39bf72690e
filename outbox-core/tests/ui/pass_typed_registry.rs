//! Typed and untyped categories side by side: the untyped API is as before.

use outbox_core::{Category, Contract, HandlerError, MemoryStore, Message, Receivers, ShardKey};

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct OrganizationV1 {
    pub name: String,
}

impl Contract for OrganizationV1 {
    const VERSION: u32 = 1;
}

outbox_core::registry! {
    OrganizationScope = 0 (shard_field = "organization_id") {
        OrganizationUpdate = 1 (payload = OrganizationV1),
        OrganizationPing = 2,
        OrganizationAudit = 3 (payload = OrganizationV1, no_coalesce),
        OrganizationLegacy = 4 (retired),
    }
}

fn main() {
    assert_eq!(OutboxCategory::OrganizationUpdate.payload_version(), Some(1));
    assert_eq!(OutboxCategory::OrganizationPing.payload_version(), None);
    assert!(!OutboxCategory::OrganizationAudit.coalesces());
    let store = MemoryStore::new();
    let shard = ShardKey::region(OutboxScope::OrganizationScope, 1);
    store
        .write_typed(
            &shard,
            outbox_categories::OrganizationUpdate,
            1,
            &OrganizationV1 { name: "acme".into() },
        )
        .unwrap();
    store.write(&shard, OutboxCategory::OrganizationPing, 1, Some(serde_json::json!({})));
    let _receivers: Receivers<OutboxCategory> = Receivers::new()
        .on_typed(
            outbox_categories::OrganizationUpdate,
            |_message: Message<OutboxCategory>, _org: OrganizationV1| async {
                Ok::<_, HandlerError>(())
            },
        )
        .on(OutboxCategory::OrganizationPing, |_message| async {
            Ok::<_, HandlerError>(())
        });
}
