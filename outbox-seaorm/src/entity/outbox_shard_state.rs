//! The `outbox_shard_state` table: the backoff of each failing shard.

use sea_orm::entity::prelude::*;

/// A shard whose last delivery failed: it is not tried before `retry_at`.
/// The row goes when the shard delivers again.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "outbox_shard_state")]
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
    /// The shard identifier.
    #[sea_orm(primary_key, auto_increment = false)]
    pub shard_identifier: i64,
    /// Failed attempts since the last success.
    pub attempts: i32,
    /// The last backoff delay, in milliseconds.
    pub last_backoff_ms: Option<i64>,
    /// The next attempt.
    pub retry_at: DateTimeUtc,
    /// The last failure.
    pub last_error: Option<String>,
    /// When it failed last.
    pub failed_at: DateTimeUtc,
}

/// No relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
