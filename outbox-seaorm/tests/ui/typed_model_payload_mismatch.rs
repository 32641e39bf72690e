// A model of a typed category cannot write untyped JSON, nor another type.
use outbox_testing::contracts::OrgV2;

outbox_core::registry! {
    OrganizationScope = 0 (shard_field = "organization_id", owner_table = "organization") {
        OrganizationUpdate = 1 (payload = OrgV2),
    }
}

mod organization {
    use outbox_core::HandlerError;
    use outbox_seaorm::replication::RegionReplication;
    use outbox_testing::contracts::OrgV1;
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, outbox_seaorm::replication::ReplicatedRegionModel)]
    #[sea_orm(table_name = "organization")]
    #[outbox(category = crate::OutboxCategory::OrganizationUpdate, active_model_behavior)]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        pub name: String,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    #[async_trait::async_trait]
    impl RegionReplication for Model {
        fn payload_for_update(&self) -> Option<serde_json::Value> {
            Some(serde_json::json!({ "name": self.name }))
        }
        async fn handle_async_replication(&self, _: &(), _: i64) -> Result<(), HandlerError> {
            Ok(())
        }
        async fn handle_async_deletion(_: &(), _: i64, _: i64, _: Option<OrgV1>) -> Result<(), HandlerError> {
            Ok(())
        }
    }
}

fn main() {}
