outbox_core::registry! {
    OrganizationScope = 0 {
        OrganizationUpdate = 1,
    }
    UserScope = 0 {
        UserUpdate = 2,
    }
}

fn main() {}
