outbox_core::registry! {
    OrganizationScope = 0 {
        OrganizationUpdate = 1,
    }
    UserScope = 1 {
        OrganizationUpdate = 2,
    }
}

fn main() {}
