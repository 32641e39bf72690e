outbox_core::registry! {
    OrganizationScope = 0 {
        OrganizationUpdate = 1,
    }
    UserScope = 1 {
        UserUpdate = 1,
    }
}

fn main() {}
