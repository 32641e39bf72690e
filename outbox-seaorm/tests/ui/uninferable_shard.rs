outbox_core::registry! {
    OrganizationScope = 0 (shard_field = "organization_id", owner_table = "organization") {
        OrganizationUpdate = 1,
        ProjectUpdate = 2,
    }
    AuditScope = 1 {
        AuditEvent = 10,
    }
}

mod audit {
    use super::OutboxCategory;
    use sea_orm::entity::prelude::*;

    /// The audit scope declares no shard_field.
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, outbox_seaorm::replication::ReplicatedRegionModel)]
    #[sea_orm(table_name = "audit")]
    #[outbox(category = OutboxCategory::AuditEvent)]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        pub actor_id: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}

    #[async_trait::async_trait]
    impl outbox_seaorm::replication::RegionReplication for Model {
        async fn handle_async_replication(&self, _: &(), _: i64) -> Result<(), outbox_core::HandlerError> {
            Ok(())
        }
        async fn handle_async_deletion(_: &(), _: i64, _: i64, _: Option<serde_json::Value>) -> Result<(), outbox_core::HandlerError> {
            Ok(())
        }
    }
}

fn main() {}
