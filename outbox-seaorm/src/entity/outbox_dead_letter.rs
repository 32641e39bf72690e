//! The `outbox_dead_letter` table: rows of scopes that opted into
//! dead-lettering, moved aside after their last allowed attempt.
//!
//! List, replay and discard them through `StoreAdmin` (or the admin API);
//! this entity is for queries of your own.

use sea_orm::entity::prelude::*;

/// A dead-lettered outbox row, with the same id it had in the outbox.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "outbox_dead_letter")]
pub struct Model {
    /// 0 for the region outbox, 1 for the control outbox.
    #[sea_orm(primary_key, auto_increment = false)]
    pub kind: i16,
    /// Its id in the outbox (kept when replayed).
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: i64,
    /// The target region (empty for the region outbox).
    pub region_name: String,
    /// `OutboxScope` value.
    pub shard_scope: i32,
    /// The shard identifier.
    pub shard_identifier: i64,
    /// `OutboxCategory` value.
    pub category: i32,
    /// The object.
    pub object_identifier: i64,
    /// The payload.
    pub payload: Option<Json>,
    /// When it was first scheduled.
    pub scheduled_from: DateTimeUtc,
    /// When it was last scheduled.
    pub scheduled_for: DateTimeUtc,
    /// When it was written.
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
    /// Why it was dead-lettered.
    pub error: String,
    /// When.
    pub dead_lettered_at: DateTimeUtc,
}

/// No relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
