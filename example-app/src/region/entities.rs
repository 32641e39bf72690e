//! The region silo's replicated models.

use serde::{Deserialize, Serialize};

/// Organizations: replicated to Control's organization mappings.
pub mod organization {
    use super::*;
    use sea_orm::entity::prelude::*;

    /// An organization living in this region.
    #[derive(
        Clone,
        Debug,
        PartialEq,
        DeriveEntityModel,
        Serialize,
        Deserialize,
        outbox_seaorm::replication::ReplicatedRegionModel,
    )]
    #[sea_orm(table_name = "organization")]
    #[outbox(category = crate::registry::OutboxCategory::OrganizationUpdate, context = crate::region::RegionContext, active_model_behavior)]
    pub struct Model {
        /// Id.
        #[sea_orm(primary_key)]
        pub id: i64,
        /// Unique slug.
        pub slug: String,
        /// Display name.
        pub name: String,
    }

    /// No relations.
    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}
}

/// Memberships: replicated to Control's member mappings (which in turn
/// replicate the user to this region).
pub mod organization_member {
    use super::*;
    use sea_orm::entity::prelude::*;

    /// A user's membership of an organization; sharded by `organization_id`.
    #[derive(
        Clone,
        Debug,
        PartialEq,
        DeriveEntityModel,
        Serialize,
        Deserialize,
        outbox_seaorm::replication::ReplicatedRegionModel,
    )]
    #[sea_orm(table_name = "organization_member")]
    #[outbox(category = crate::registry::OutboxCategory::OrganizationMemberUpdate, context = crate::region::RegionContext, active_model_behavior)]
    pub struct Model {
        /// Id.
        #[sea_orm(primary_key)]
        pub id: i64,
        /// The organization.
        pub organization_id: i64,
        /// The user (a Control user id).
        pub user_id: i64,
        /// The role.
        pub role: String,
    }

    /// No relations.
    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}
}
