//! The `outbox_shard_claim` table: live claims and failing shards' backoff.

use sea_orm::entity::prelude::*;

/// A claim on a shard, or (with no owner) a shard backing off until
/// `lease_until`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "outbox_shard_claim")]
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
    /// The fencing token of the claim.
    pub token: i64,
    /// Who holds the claim; `None` while the shard backs off.
    pub owner: Option<String>,
    /// End of the lease, or of the backoff.
    pub lease_until: DateTimeUtc,
    /// The last backoff delay, in milliseconds.
    pub last_backoff_ms: Option<i64>,
    /// Failed attempts since the last success.
    pub attempts: i32,
    /// The last failure, for operators.
    pub last_error: Option<String>,
}

/// No relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
