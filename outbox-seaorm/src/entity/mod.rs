//! SeaORM entities for the outbox tables, for queries of your own (admin
//! pages, audits, one-off repairs).
//!
//! Write outbox rows through [`crate::write`], not through these entities: the
//! write API checks the registry and, on SQLite, stores timestamps in the
//! fixed-width form that the drain compares as text.
//!
//! ```
//! # outbox_core::registry! {
//! #     OrganizationScope = 0 (shard_field = "organization_id") { OrganizationUpdate = 1 }
//! # }
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # use sea_orm_migration::MigratorTrait;
//! # let db = sea_orm::Database::connect("sqlite::memory:").await?;
//! # outbox_migrations::OutboxMigrator::up(&db, None).await?;
//! # for (shard, object) in [(42, 1), (42, 2), (7, 3)] {
//! #     let message = outbox_seaorm::OutboxMessage::new(
//! #         OutboxCategory::OrganizationUpdate,
//! #         outbox_seaorm::ShardId(shard),
//! #         outbox_seaorm::ObjectId(object),
//! #     );
//! #     outbox_seaorm::write_region(&db, message).await?;
//! # }
//! use outbox_seaorm::entity::region_outbox;
//! use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
//!
//! // The pending rows of shard 42, oldest first.
//! let pending = region_outbox::Entity::find()
//!     .filter(region_outbox::Column::ShardIdentifier.eq(42))
//!     .order_by_asc(region_outbox::Column::Id)
//!     .all(&db)
//!     .await?;
//! let objects: Vec<i64> = pending.iter().map(|row| row.object_identifier).collect();
//! assert_eq!(objects, [1, 2]);
//! # Ok(()) }
//! ```

pub mod control_outbox;
pub mod outbox_claim_bucket;
pub mod outbox_control;
pub mod outbox_dead_letter;
pub mod outbox_shard_state;
pub mod region_outbox;
