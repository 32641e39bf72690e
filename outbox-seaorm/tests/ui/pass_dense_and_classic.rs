outbox_core::registry! {
    OrganizationScope = 0 (shard_field = "organization_id", owner_table = "organization") {
        OrganizationUpdate = 1,
        ProjectUpdate = 2,
    }
    AuditScope = 1 {
        AuditEvent = 10,
    }
}

mod project {
    use super::OutboxCategory;
    use sea_orm::entity::prelude::*;

    /// Classic format; shard inferred as `organization_id`.
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, outbox_seaorm::replication::ReplicatedRegionModel)]
    #[sea_orm(table_name = "project")]
    #[outbox(category = OutboxCategory::ProjectUpdate, active_model_behavior)]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        pub organization_id: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

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

mod organization {
    use super::OutboxCategory;
    use sea_orm::entity::prelude::*;

    /// Dense format: SeaORM copies the derive onto `ModelEx`, which it skips.
    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, outbox_seaorm::replication::ReplicatedRegionModel)]
    #[sea_orm(table_name = "organization")]
    #[outbox(category = OutboxCategory::OrganizationUpdate, active_model_behavior)]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i32,
        pub name: String,
    }

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

fn main() {
    use outbox_seaorm::replication::ReplicatedModel;
    assert_eq!(<project::Model as ReplicatedModel>::SHARD_FIELD, "organization_id");
    assert_eq!(<organization::Model as ReplicatedModel>::SHARD_FIELD, "id");
}
