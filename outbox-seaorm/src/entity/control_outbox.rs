//! The `control_outbox` table.

use sea_orm::entity::prelude::*;

/// A pending control-outbox row.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "control_outbox")]
pub struct Model {
    /// Order within the shard; the coalescing winner is the highest id.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The target region; part of the shard.
    pub region_name: String,
    /// `OutboxScope` value.
    pub shard_scope: i32,
    /// E.g. the organization id.
    pub shard_identifier: i64,
    /// `OutboxCategory` value.
    pub category: i32,
    /// E.g. the model's id.
    pub object_identifier: i64,
    /// What the receiver needs.
    pub payload: Option<Json>,
    /// When `scheduled_for` was last set.
    pub scheduled_from: DateTimeUtc,
    /// When the row is due.
    pub scheduled_for: DateTimeUtc,
    /// When the row was written.
    pub date_added: DateTimeUtc,
    /// The W3C `traceparent` of the span that wrote the row, if any (see
    /// `outbox_core::trace`; a value that does not parse is ignored).
    pub traceparent: Option<String>,
    /// The message id (UUID v7) assigned when the row was written; null
    /// for a row written without one (see
    /// `outbox_core::message::derived_message_id`).
    pub message_id: Option<Uuid>,
    /// The version of the payload's contract a typed writer stored
    /// (`outbox_core::contract`); null for an untyped write, which typed
    /// receivers read as version 1.
    pub payload_version: Option<i32>,
}

/// No relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
