//! `GET /health`, `GET /backfills` and `GET /fences`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use outbox_core::store::{HorizonHolder, HorizonHolderKind};
use outbox_core::{Backlog, Count, ScopeBacklog};
use outbox_seaorm::backfill::BackfillStatus;
use outbox_seaorm::inbox::FenceRecord;

use super::super::error::AdminError;
use super::count::CountSchema;
use super::query::{check_limit, hundred};
use super::Kind;

/// `GET /health`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HealthView {
    /// Per table.
    pub backlogs: Vec<BacklogView>,
    /// Runtime controls in force.
    pub controls: usize,
    /// Shards parked on a payload version their receiver does not know
    /// (a producer deployed ahead of it), at most a hundred per table:
    /// each names its category and version in `state.last_error`. Deploy
    /// the receiver; they deliver on their own then.
    pub parked: Vec<super::shards::FailingView>,
}

/// At most this many parked shards per table in `GET /health`.
pub(crate) const PARKED_LISTED: usize = 100;

/// One table's backlog.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BacklogView {
    /// The table.
    #[schema(value_type = String, example = "region")]
    pub kind: Kind,
    /// Rows pending: `{"precision": "exact" | "at_least" | "estimated",
    /// "value": n}` (see [`Count`]).
    #[schema(value_type = CountSchema)]
    pub depth: Count,
    /// Age of the oldest pending row, in seconds.
    pub oldest_age_seconds: Option<f64>,
    /// Shards backing off.
    pub failing_shards: u64,
    /// Shards quarantined.
    pub quarantined_shards: u64,
    /// Shards paused.
    pub paused_shards: u64,
    /// Shards parked on a payload version their receiver does not know.
    pub parked_shards: u64,
    /// Dead tuples of the table (PostgreSQL).
    pub dead_tuples: Option<u64>,
    /// Age of the database's oldest open transaction, in seconds
    /// (PostgreSQL): it holds back vacuum.
    pub oldest_transaction_age_seconds: Option<f64>,
    /// What holds vacuum back the furthest (PostgreSQL): end it when dead
    /// tuples pile up.
    pub horizon: Option<HorizonHolderView>,
    /// Rows in the dead-letter table: exact up to the count cap, else at
    /// least the cap.
    #[schema(value_type = CountSchema)]
    pub dead_letters: Count,
    /// Per scope: pending rows and the oldest's age.
    pub scopes: Vec<ScopeBacklogView>,
}

impl From<&Backlog> for BacklogView {
    fn from(backlog: &Backlog) -> Self {
        Self {
            kind: backlog.kind,
            depth: backlog.depth,
            oldest_age_seconds: backlog.oldest_age.map(|age| age.as_secs_f64()),
            failing_shards: backlog.failing_shards,
            quarantined_shards: backlog.quarantined_shards,
            paused_shards: backlog.paused_shards,
            parked_shards: backlog.parked_shards,
            dead_tuples: backlog.dead_tuples,
            oldest_transaction_age_seconds: backlog
                .oldest_transaction_age
                .map(|age| age.as_secs_f64()),
            horizon: backlog.horizon.as_ref().map(HorizonHolderView::from),
            dead_letters: backlog.dead_letters,
            scopes: backlog.scopes.iter().map(ScopeBacklogView::from).collect(),
        }
    }
}

/// What holds vacuum's horizon back ([`HorizonHolder`]).
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HorizonHolderView {
    /// What it is: `session`, `prepared transaction` or `replication
    /// slot`.
    #[schema(example = "session")]
    pub holder: String,
    /// The session's process id (or the slot user's).
    pub pid: Option<i32>,
    /// Application name, prepared transaction gid, or slot name.
    pub name: String,
    /// The session's user, or the prepared transaction's owner.
    pub user: Option<String>,
    /// The session's state, or the slot's (`active`, `inactive`).
    pub state: Option<String>,
    /// How long its transaction has been open, in seconds.
    pub age_seconds: Option<f64>,
    /// How many transactions behind the present its horizon is.
    pub xid_age: u64,
    /// What ends it, as SQL an operator can run.
    pub remedy: String,
}

impl From<&HorizonHolder> for HorizonHolderView {
    fn from(holder: &HorizonHolder) -> Self {
        Self {
            holder: holder.kind.as_str().to_owned(),
            pid: holder.pid,
            name: holder.name.clone(),
            user: holder.user.clone(),
            state: holder.state.clone(),
            age_seconds: holder.age.map(|age| age.as_secs_f64()),
            xid_age: holder.xid_age,
            remedy: remedy(holder),
        }
    }
}

/// The statement that ends what holds the horizon back.
pub(crate) fn remedy(holder: &HorizonHolder) -> String {
    let quoted = holder.name.replace('\'', "''");
    match (holder.kind, holder.pid) {
        (HorizonHolderKind::Session, Some(pid)) => format!("SELECT pg_terminate_backend({pid})"),
        (HorizonHolderKind::Session, None) => "end the session's transaction".to_owned(),
        (HorizonHolderKind::PreparedTransaction, _) => format!("ROLLBACK PREPARED '{quoted}'"),
        (HorizonHolderKind::ReplicationSlot, _) => {
            format!("SELECT pg_drop_replication_slot('{quoted}') (once its consumer is gone)")
        }
    }
}

/// One scope's backlog.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScopeBacklogView {
    /// The scope's value.
    pub scope: i32,
    /// The scope's declared name (`null` for a scope this binary does not
    /// declare, which has rows pending all the same).
    #[schema(example = "OrganizationScope")]
    pub scope_name: Option<String>,
    /// Rows pending: `{"precision": "exact" | "at_least" | "estimated",
    /// "value": n}` (see [`Count`]).
    #[schema(value_type = CountSchema)]
    pub depth: Count,
    /// Age of its oldest pending row, in seconds.
    pub oldest_age_seconds: Option<f64>,
}

impl From<&ScopeBacklog> for ScopeBacklogView {
    fn from(scope: &ScopeBacklog) -> Self {
        Self {
            scope: scope.scope,
            scope_name: scope.scope_name.map(str::to_owned),
            depth: scope.depth,
            oldest_age_seconds: scope.oldest_age.map(|age| age.as_secs_f64()),
        }
    }
}

/// `GET /backfills`: where a replicated table's backfill stands.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BackfillView {
    /// The table.
    pub table: String,
    /// The replication version the code writes.
    pub coded_version: u32,
    /// The version the backfill may advance to now (`None`: its option is
    /// unset, the backfill does not run).
    pub target_version: Option<u32>,
    /// The cursor's version, if a cursor exists.
    pub cursor_version: Option<u32>,
    /// The cursor: the next backfill batch starts at this id (0 when done
    /// or not started).
    pub lower_bound_id: i64,
    /// Rows still to backfill for the target version.
    pub rows_remaining: u64,
    /// Whether the backfill of the target version is complete.
    pub done: bool,
}

impl From<&BackfillStatus> for BackfillView {
    fn from(status: &BackfillStatus) -> Self {
        Self {
            table: status.table.to_owned(),
            coded_version: status.coded_version,
            target_version: status.target_version,
            cursor_version: status.cursor_version,
            lower_bound_id: status.lower_bound_id,
            rows_remaining: status.rows_remaining,
            done: status.done,
        }
    }
}

/// `GET /fences`: what the fenced receivers recorded, those that refused
/// the most deliveries as superseded first.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FencesView {
    /// Deliveries refused as superseded, over every record.
    pub superseded: u64,
    /// At most `limit` records.
    pub records: Vec<FenceView>,
}

/// One consumer's record for one sender and shard.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FenceView {
    /// The consumer.
    pub consumer: String,
    /// The sender.
    pub sender: String,
    /// The shard, as the sender wrote it (`region:0/42`).
    pub shard: String,
    /// The highest fencing token applied.
    pub fence: i64,
    /// When it was applied.
    pub applied_at: DateTime<Utc>,
    /// Deliveries refused as superseded.
    pub superseded: u64,
    /// When the last one was.
    pub superseded_at: Option<DateTime<Utc>>,
}

impl From<&FenceRecord> for FenceView {
    fn from(record: &FenceRecord) -> Self {
        Self {
            consumer: record.consumer.clone(),
            sender: record.sender.clone(),
            shard: record.shard.clone(),
            fence: record.fence.get(),
            applied_at: record.applied_at,
            superseded: record.superseded,
            superseded_at: record.superseded_at,
        }
    }
}

/// `?limit=100` of `GET /fences`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FencesQuery {
    #[serde(default = "hundred")]
    pub(crate) limit: usize,
}

impl FencesQuery {
    pub(crate) fn checked(self) -> Result<u64, AdminError> {
        check_limit(self.limit).map(|limit| limit as u64)
    }
}
