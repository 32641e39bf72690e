//! The control silo's replicated model.

use serde::{Deserialize, Serialize};

/// Users: replicated to every region where they are a member.
pub mod users {
    use super::*;
    use sea_orm::entity::prelude::*;

    /// A user.
    #[derive(
        Clone,
        Debug,
        PartialEq,
        DeriveEntityModel,
        Serialize,
        Deserialize,
        outbox_seaorm::replication::ReplicatedControlModel,
    )]
    #[sea_orm(table_name = "users")]
    #[outbox(category = crate::registry::OutboxCategory::UserUpdate, context = crate::control::ControlContext, active_model_behavior)]
    pub struct Model {
        /// Id.
        #[sea_orm(primary_key)]
        pub id: i64,
        /// Unique email.
        pub email: String,
        /// Display name.
        pub name: String,
    }

    /// No relations.
    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}
}
