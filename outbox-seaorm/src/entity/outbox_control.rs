//! The `outbox_control` table: operators' pauses and culls (see
//! `outbox_core::control`). Set and lift them through `DrainOperator::pause`,
//! `cull` and `resume` (or the admin API): those also release parked shards.

use sea_orm::entity::prelude::*;

/// A runtime control on a shard, or on every shard of a scope.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "outbox_control")]
pub struct Model {
    /// 0 for the region outbox, 1 for the control outbox.
    #[sea_orm(primary_key, auto_increment = false)]
    pub kind: i16,
    /// The target region (empty for the region outbox).
    #[sea_orm(primary_key, auto_increment = false)]
    pub region_name: String,
    /// `OutboxScope` value.
    #[sea_orm(primary_key, auto_increment = false)]
    pub shard_scope: i32,
    /// Every shard of the scope (`shard_identifier` is then 0).
    #[sea_orm(primary_key, auto_increment = false)]
    pub whole_scope: bool,
    /// The shard identifier.
    #[sea_orm(primary_key, auto_increment = false)]
    pub shard_identifier: i64,
    /// 1 pause, 2 cull.
    pub action: i16,
    /// Why.
    pub reason: Option<String>,
    /// Since when.
    pub created_at: DateTimeUtc,
}

/// No relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
