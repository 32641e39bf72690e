#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Untagged {
    pub name: String,
}

outbox_core::registry! {
    OrganizationScope = 0 {
        OrganizationUpdate = 1 (payload = Untagged),
    }
}

fn main() {}
