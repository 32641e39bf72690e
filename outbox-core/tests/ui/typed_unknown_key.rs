#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct OrganizationV1 {
    pub name: String,
}
impl outbox_core::Contract for OrganizationV1 {
    const VERSION: u32 = 1;
}

outbox_core::registry! {
    OrganizationScope = 0 {
        OrganizationUpdate = 1 (paylod = OrganizationV1),
    }
}

fn main() {}
