outbox_core::registry! {
    OrganizationScope = 0 (shard_field = "organization_id", owner_table = "organization") {
        OrganizationUpdate = 1,
        ProjectUpdate = 2,
    }
    AuditScope = 1 {
        AuditEvent = 10,
    }
}

mod team {
    use super::OutboxCategory;
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, outbox_seaorm::replication::ReplicatedRegionModel)]
    #[sea_orm(table_name = "team")]
    #[outbox(category = OutboxCategory::ProjectUpdate, shard = organisation_id)]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        pub organization_id: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

fn main() {}
