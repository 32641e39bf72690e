use outbox_core::{Contract, HandlerError, Message, Receivers};

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct OrganizationV2 {
    pub name: String,
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
    // A receiver of OrganizationUpdate gets the registry's OrganizationV2.
    let _ = Receivers::new().on_typed(
        outbox_categories::OrganizationUpdate,
        |_message: Message<OutboxCategory>, _user: UserV1| async { Ok::<_, HandlerError>(()) },
    );
}
