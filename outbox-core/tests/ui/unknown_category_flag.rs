outbox_core::registry! {
    OrganizationScope = 0 {
        OrganizationUpdate = 1 (retird),
    }
}

fn main() {}
