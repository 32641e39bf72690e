// A model of a typed category writes and gets the registry's payload type;
// one of an untyped category keeps `serde_json::Value`.
use outbox_testing::contracts::OrgV2;

outbox_core::registry! {
    OrganizationScope = 0 (shard_field = "organization_id", owner_table = "organization") {
        OrganizationUpdate = 1 (payload = OrgV2),
        ProjectUpdate = 2,
    }
}

mod organization {
    use outbox_core::HandlerError;
    use outbox_seaorm::replication::RegionReplication;
    use outbox_testing::contracts::OrgV2;
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
        fn payload_for_update(&self) -> Option<OrgV2> {
            Some(OrgV2 { name: self.name.clone(), seats: 1 })
        }
        async fn handle_async_replication(&self, _: &(), _: i64) -> Result<(), HandlerError> {
            Ok(())
        }
        async fn handle_async_deletion(_: &(), _: i64, _: i64, payload: Option<OrgV2>) -> Result<(), HandlerError> {
            let _seats: Option<u32> = payload.map(|org| org.seats);
            Ok(())
        }
    }
}

mod project {
    use outbox_core::HandlerError;
    use outbox_seaorm::replication::RegionReplication;
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, outbox_seaorm::replication::ReplicatedRegionModel)]
    #[sea_orm(table_name = "project")]
    #[outbox(category = crate::OutboxCategory::ProjectUpdate, active_model_behavior)]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        pub organization_id: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    #[async_trait::async_trait]
    impl RegionReplication for Model {
        fn payload_for_update(&self) -> Option<serde_json::Value> {
            Some(serde_json::json!({ "organization_id": self.organization_id }))
        }
        async fn handle_async_replication(&self, _: &(), _: i64) -> Result<(), HandlerError> {
            Ok(())
        }
        async fn handle_async_deletion(_: &(), _: i64, _: i64, _: Option<serde_json::Value>) -> Result<(), HandlerError> {
            Ok(())
        }
    }
}

fn main() {}
