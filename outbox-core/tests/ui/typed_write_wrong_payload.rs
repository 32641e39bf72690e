use outbox_core::{Contract, MemoryStore, ShardKey};

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct OrganizationV2 {
    pub name: String,
    pub slug: String,
}
impl Contract for OrganizationV2 {
    const VERSION: u32 = 2;
}

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct UserV1 {
    pub email: String,
}
impl Contract for UserV1 {
    const VERSION: u32 = 1;
}

outbox_core::registry! {
    OrganizationScope = 0 {
        OrganizationUpdate = 1 (payload = OrganizationV2),
    }
}

fn main() {
    let store = MemoryStore::new();
    let shard = ShardKey::region(OutboxScope::OrganizationScope, 1);
    // The registry says OrganizationUpdate carries an OrganizationV2.
    let _ = store.write_typed(
        &shard,
        outbox_categories::OrganizationUpdate,
        1,
        &UserV1 { email: "a@example.com".into() },
    );
}
