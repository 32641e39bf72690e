//! What the admin routes take and answer, as JSON: one module per group of
//! routes, and the shard and target references they share.
//!
//! Two conventions hold in every type here:
//!
//! - A scope and a category are answered by number and by name side by
//!   side: `scope` and `scope_name`, `category` and `category_name`, the
//!   names the registry declares (`null` for a number this binary does not
//!   declare). A request may echo `scope_name` back; if it does, it must
//!   be the name of its `scope` (else `400 bad_request`).
//! - `kind` is always the outbox table, `"region"` or `"control"`, in
//!   requests, queries and answers alike; what holds vacuum back is a
//!   `holder`, not a kind.

mod audit;
mod controls;
mod count;
mod dead_letters;
mod health;
mod history;
mod query;
mod shards;
mod target;

/// An outbox table: `"region"` or `"control"` (the core type, with serde).
pub use outbox_core::OutboxKind as Kind;

pub use audit::AuditView;
pub use controls::{Action, ControlView, LiftControl, SetControl};
pub use count::CountSchema;
pub use dead_letters::{DeadLetterView, Discarded, ReplayDeadLetters, Replayed};
pub(crate) use health::PARKED_LISTED;
pub use health::{
    BackfillView, BacklogView, FenceView, FencesView, HealthView, HorizonHolderView,
    ScopeBacklogView,
};
pub use history::{HistoryView, PointView};
pub use shards::{
    FailingView, HeadView, Retried, RetryShards, SetAside, SetAsideDone, ShardView, ShardsView,
    StateView,
};
pub use target::{ShardRef, TargetRef};

pub(crate) use audit::AuditQuery;
pub(crate) use health::{remedy, FencesQuery};
pub(crate) use history::HistoryQuery;
pub(crate) use query::{ListQuery, MAX_LIMIT};
pub(crate) use target::ShardQuery;
