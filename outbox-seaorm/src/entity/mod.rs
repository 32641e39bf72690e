//! SeaORM entities for the outbox tables, for queries of your own (admin
//! pages, audits, one-off repairs).
//!
//! Write outbox rows through [`crate::write`], not through these entities: the
//! write API checks the registry and, on SQLite, stores timestamps in the
//! fixed-width form that the drain compares as text.
//!
//! ```no_run
//! # async fn run(db: &sea_orm::DatabaseConnection) -> Result<(), sea_orm::DbErr> {
//! use outbox_seaorm::entity::region_outbox;
//! use sea_orm::{EntityTrait, QueryFilter, ColumnTrait};
//!
//! let stuck = region_outbox::Entity::find()
//!     .filter(region_outbox::Column::ShardIdentifier.eq(42))
//!     .all(db)
//!     .await?;
//! # Ok(()) }
//! ```

pub mod control_outbox;
pub mod outbox_claim_bucket;
pub mod outbox_control;
pub mod outbox_dead_letter;
pub mod outbox_shard_state;
pub mod region_outbox;
