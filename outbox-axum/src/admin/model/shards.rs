//! `GET /shards`, `POST /shards/retry`, `GET /shards/head` and
//! `POST /shards/set-aside`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use outbox_core::store::{FailingShard, ShardDepth, ShardState};
use outbox_core::{Category, Count};

use super::count::CountSchema;
use super::target::{category_name, ShardRef};
use super::Kind;

/// A shard's failure state: what it waits for, never a sentinel date.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StateView {
    /// `backing_off` (it is tried again at `next_attempt`), `paused` (by
    /// an operator), `quarantined` (after a permanent error: it waits
    /// for an operator) or `parked` (on a payload version its receiver
    /// does not know: deploy the receiver; tried again at `next_attempt`).
    #[schema(value_type = String, example = "backing_off")]
    pub status: outbox_core::ShardStatus,
    /// Its next attempt while it backs off or is parked; `null` while it
    /// waits for an operator.
    pub next_attempt: Option<DateTime<Utc>>,
    /// Failed attempts since its last success.
    pub attempts: u32,
    /// What failed last ("paused by an operator" while paused).
    pub last_error: Option<String>,
    /// When.
    pub failed_at: DateTime<Utc>,
}

impl From<&ShardState> for StateView {
    fn from(state: &ShardState) -> Self {
        Self {
            status: state.status(),
            next_attempt: state.next_attempt(),
            attempts: state.attempts,
            last_error: state.last_error.clone(),
            failed_at: state.failed_at,
        }
    }
}

/// A pending shard.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ShardView {
    /// Which.
    pub shard: ShardRef,
    /// Rows pending: `{"precision": "exact" | "at_least" | "estimated",
    /// "value": n}` (see [`Count`]).
    #[schema(value_type = CountSchema)]
    pub depth: Count,
    /// When its oldest pending row was written.
    pub oldest_date_added: DateTime<Utc>,
    /// When its next row is due; `null` while it waits for an operator
    /// (paused or quarantined).
    pub next_scheduled_for: Option<DateTime<Utc>>,
    /// Its failure state, if it failed (or is paused).
    pub state: Option<StateView>,
}

impl ShardView {
    pub(crate) fn of<C: Category>(depth: &ShardDepth, failing: &[FailingShard]) -> Self {
        Self {
            shard: ShardRef::of::<C>(&depth.shard),
            depth: depth.depth,
            oldest_date_added: depth.oldest_date_added,
            next_scheduled_for: (depth.next_scheduled_for < outbox_core::store::paused_until())
                .then_some(depth.next_scheduled_for),
            state: failing
                .iter()
                .find(|f| f.shard == depth.shard)
                .map(|f| StateView::from(&f.state)),
        }
    }
}

/// A shard with a failure state.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FailingView {
    /// Which.
    pub shard: ShardRef,
    /// Its state.
    pub state: StateView,
}

impl FailingView {
    pub(crate) fn of<C: Category>(failing: &FailingShard) -> Self {
        Self {
            shard: ShardRef::of::<C>(&failing.shard),
            state: StateView::from(&failing.state),
        }
    }
}

/// `GET /shards`: one snapshot (one transaction).
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ShardsView {
    /// The table.
    #[schema(value_type = String, example = "region")]
    pub kind: Kind,
    /// Rows pending: exact up to the count cap, above it estimated or at
    /// least the cap (see [`Count`]).
    #[schema(value_type = CountSchema)]
    pub pending: Count,
    /// Dead letters: exact up to the count cap, else at least the cap.
    #[schema(value_type = CountSchema)]
    pub dead_letters: Count,
    /// The deepest shards, deepest first (their failure state is that of
    /// the same snapshot).
    pub shards: Vec<ShardView>,
    /// Shards that failed (backing off or quarantined), next attempt
    /// first.
    pub failing: Vec<FailingView>,
    /// Shards parked by an operator's pause, apart from the failing ones.
    pub paused: Vec<FailingView>,
}

/// `POST /shards/retry`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryShards {
    /// Which (failing ones: unknown shards are refused).
    pub shards: Vec<ShardRef>,
}

/// What `POST /shards/retry` did.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Retried {
    /// Made due at once.
    pub released: Vec<ShardRef>,
    /// Left alone: their bucket is held by a worker right now; ask again.
    pub held: Vec<ShardRef>,
}

/// `POST /shards/set-aside`: move a blocked shard's head message (its
/// coalescing group) to the dead letters, so that the rest of it flows.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetAside {
    /// Which shard.
    pub shard: ShardRef,
    /// Why (kept with the dead letters' error and in the audit log).
    #[serde(default)]
    pub reason: Option<String>,
}

/// What `POST /shards/set-aside` did.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SetAsideDone {
    /// The shard.
    pub shard: ShardRef,
    /// The ids moved to the dead letters (`POST /dead-letters/replay` with
    /// them brings them back).
    pub ids: Vec<i64>,
}

/// `GET /shards/head`: a shard's head message, what blocks it.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HeadView {
    /// The shard.
    pub shard: ShardRef,
    /// The head row's id.
    pub id: i64,
    /// Its message id.
    pub message_id: uuid::Uuid,
    /// Its category's value.
    pub category: i32,
    /// Its category's declared name (`null` for one this binary does not
    /// know).
    pub category_name: Option<String>,
    /// The object it is about.
    pub object_identifier: i64,
    /// Its payload's size in bytes (JSON).
    pub payload_size: usize,
    /// The ids delivered with it (its coalescing group), its own first:
    /// what `POST /shards/set-aside` moves.
    pub group: Vec<i64>,
    /// The shard's failed attempts in a row (0 when it has not failed).
    pub attempts: u32,
    /// The shard's last error, if it failed.
    pub last_error: Option<String>,
}

impl HeadView {
    pub(crate) fn of<C: Category>(head: &outbox_core::HeadMessage) -> Self {
        Self {
            shard: ShardRef::of::<C>(&head.row.shard),
            id: head.row.id,
            message_id: head.row.message_id,
            category: head.row.category,
            category_name: category_name::<C>(head.row.category),
            object_identifier: head.row.object_identifier,
            payload_size: head.payload_size(),
            group: head.group.clone(),
            attempts: head.state.as_ref().map_or(0, |state| state.attempts),
            last_error: head
                .state
                .as_ref()
                .and_then(|state| state.last_error.clone()),
        }
    }
}
