//! The `outbox_claim_bucket` table: leases on buckets of shards.

use sea_orm::entity::prelude::*;

/// A bucket of shards and its lease. A bucket whose `lease_until` has passed,
/// or whose `token` is null, is free.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "outbox_claim_bucket")]
pub struct Model {
    /// 0 for the region outbox, 1 for the control outbox.
    #[sea_orm(primary_key, auto_increment = false)]
    pub kind: i16,
    /// The bucket (`outbox_core::ShardKey::bucket`).
    #[sea_orm(primary_key, auto_increment = false)]
    pub bucket: i32,
    /// The fencing token of the lease, if leased.
    pub token: Option<i64>,
    /// Who holds the lease (process and a random suffix).
    pub owner: Option<String>,
    /// End of the lease.
    pub lease_until: DateTimeUtc,
    /// Grows with every claim and release.
    pub version: i64,
}

/// No relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
