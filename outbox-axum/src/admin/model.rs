//! What the admin routes take and answer, as JSON.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use outbox_core::store::{DeadLetterRow, FailingShard, ShardDepth, ShardState};
use outbox_seaorm::backfill::BackfillStatus;
use outbox_seaorm::inbox::FenceRecord;

use outbox_core::{Backlog, ControlAction, ControlTarget, Count, RuntimeControl, ShardKey};

use super::error::AdminError;

/// An outbox table: `"region"` or `"control"` (the core type, with serde).
pub use outbox_core::OutboxKind as Kind;

/// A shard: `region` is required for the control outbox and refused for
/// the region outbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ShardRef {
    /// Its table.
    #[schema(value_type = String, example = "region")]
    pub kind: Kind,
    /// Its region (control outbox only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Its scope's value.
    pub scope: i32,
    /// Its identifier.
    pub identifier: i64,
}

fn checked_region(kind: Kind, region: Option<&String>) -> Result<Option<String>, AdminError> {
    match (kind, region) {
        (Kind::Region, None) => Ok(None),
        (Kind::Region, Some(_)) => Err(AdminError::bad_request(
            "`region` names a region of the control outbox; the region outbox has none",
        )),
        (Kind::Control, Some(region)) if !region.is_empty() && region.len() <= 64 => {
            Ok(Some(region.clone()))
        }
        (Kind::Control, _) => Err(AdminError::bad_request(
            "the control outbox needs `region` (1 to 64 characters)",
        )),
    }
}

impl ShardRef {
    /// The shard key, checked.
    pub(crate) fn key(&self) -> Result<ShardKey, AdminError> {
        let region = checked_region(self.kind, self.region.as_ref())?;
        Ok(ShardKey::from_raw(
            self.kind,
            self.scope,
            self.identifier,
            region,
        ))
    }

    pub(crate) fn of(shard: &ShardKey) -> Self {
        Self {
            kind: shard.kind(),
            region: shard.region_name().map(str::to_owned),
            scope: shard.scope(),
            identifier: shard.identifier(),
        }
    }
}

/// What a control applies to: a shard, or a whole scope when `identifier`
/// is absent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TargetRef {
    /// The table.
    #[schema(value_type = String, example = "region")]
    pub kind: Kind,
    /// The region (control outbox only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The scope's value.
    pub scope: i32,
    /// The shard; absent: every shard of the scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identifier: Option<i64>,
}

impl TargetRef {
    pub(crate) fn target(&self) -> Result<ControlTarget, AdminError> {
        let region = checked_region(self.kind, self.region.as_ref())?;
        Ok(match self.identifier {
            Some(identifier) => ControlTarget::Shard(ShardKey::from_raw(
                self.kind, self.scope, identifier, region,
            )),
            None => ControlTarget::Scope {
                kind: self.kind,
                region,
                scope: self.scope,
            },
        })
    }

    pub(crate) fn of(target: &ControlTarget) -> Self {
        match target {
            ControlTarget::Shard(shard) => {
                let shard = ShardRef::of(shard);
                Self {
                    kind: shard.kind,
                    region: shard.region,
                    scope: shard.scope,
                    identifier: Some(shard.identifier),
                }
            }
            ControlTarget::Scope {
                kind,
                region,
                scope,
            } => Self {
                kind: (*kind),
                region: region.clone(),
                scope: *scope,
                identifier: None,
            },
        }
    }
}

/// `pause` or `cull`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Keep and skip.
    Pause,
    /// Drop.
    Cull,
}

impl From<Action> for ControlAction {
    fn from(action: Action) -> Self {
        match action {
            Action::Pause => ControlAction::Pause,
            Action::Cull => ControlAction::Cull,
        }
    }
}

impl From<ControlAction> for Action {
    fn from(action: ControlAction) -> Self {
        match action {
            ControlAction::Pause => Action::Pause,
            ControlAction::Cull => Action::Cull,
        }
    }
}

/// `PUT /controls`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetControl {
    /// What.
    pub target: TargetRef,
    /// Pause or cull.
    pub action: Action,
    /// Why, for the next operator (at most 1,000 characters).
    #[serde(default)]
    pub reason: Option<String>,
}

/// `DELETE /controls`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LiftControl {
    /// What.
    pub target: TargetRef,
}

/// A control as stored.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ControlView {
    /// What.
    pub target: TargetRef,
    /// Pause or cull.
    pub action: Action,
    /// Why.
    pub reason: Option<String>,
    /// Since when.
    pub created_at: DateTime<Utc>,
}

impl From<&RuntimeControl> for ControlView {
    fn from(control: &RuntimeControl) -> Self {
        Self {
            target: TargetRef::of(&control.target),
            action: control.action.into(),
            reason: control.reason.clone(),
            created_at: control.created_at,
        }
    }
}

/// A shard's failure state: what it waits for, never a sentinel date.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StateView {
    /// `backing_off` (it is tried again at `next_attempt`), `paused` (by
    /// an operator) or `quarantined` (after a permanent error: it waits
    /// for an operator).
    #[schema(value_type = String, example = "backing_off")]
    pub status: outbox_core::ShardStatus,
    /// Its next attempt while it backs off; `null` while it waits for an
    /// operator.
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
    pub(crate) fn of(depth: &ShardDepth, failing: &[FailingShard]) -> Self {
        Self {
            shard: ShardRef::of(&depth.shard),
            depth: depth.depth,
            oldest_date_added: depth.oldest_date_added,
            next_scheduled_for: (depth.next_scheduled_for < outbox_core::paused_until())
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
    pub(crate) fn of(failing: &FailingShard) -> Self {
        Self {
            shard: ShardRef::of(&failing.shard),
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
    pub(crate) fn of<C: outbox_core::Category>(head: &outbox_core::HeadMessage) -> Self {
        Self {
            shard: ShardRef::of(&head.row.shard),
            id: head.row.id,
            message_id: head.row.message_id,
            category: head.row.category,
            category_name: C::try_from(head.row.category)
                .ok()
                .map(|category| category.name().to_owned()),
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

/// `?kind=region&scope=0&identifier=65` (and `&region=us` for the control
/// outbox): one shard.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ShardQuery {
    #[serde(default = "region")]
    pub(crate) kind: Kind,
    pub(crate) scope: i32,
    pub(crate) identifier: i64,
    #[serde(default)]
    pub(crate) region: Option<String>,
}

impl ShardQuery {
    pub(crate) fn key(self) -> Result<ShardKey, AdminError> {
        ShardRef {
            kind: self.kind,
            region: self.region,
            scope: self.scope,
            identifier: self.identifier,
        }
        .key()
    }
}

/// What `POST /dead-letters/replay` did.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Replayed {
    /// Dead letters put back in the outbox.
    pub replayed: u64,
}

/// What `POST /dead-letters/discard` did.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Discarded {
    /// Dead letters deleted for good.
    pub discarded: u64,
}

/// What `POST /shards/retry` did.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Retried {
    /// Made due at once.
    pub released: Vec<ShardRef>,
    /// Left alone: their bucket is held by a worker right now; ask again.
    pub held: Vec<ShardRef>,
}

/// A dead-lettered row.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeadLetterView {
    /// Its id (kept when replayed).
    pub id: i64,
    /// Its message id (kept when replayed): what its receiver records.
    #[schema(value_type = String, format = Uuid)]
    pub message_id: outbox_core::uuid::Uuid,
    /// Its shard.
    pub shard: ShardRef,
    /// Its category's value.
    pub category: i32,
    /// Its object.
    pub object_identifier: i64,
    /// Its payload.
    #[schema(value_type = Option<Object>)]
    pub payload: Option<serde_json::Value>,
    /// Why it was dead-lettered.
    pub error: String,
    /// When it was written.
    pub date_added: DateTime<Utc>,
    /// When it was dead-lettered.
    pub dead_lettered_at: DateTime<Utc>,
}

impl From<&DeadLetterRow> for DeadLetterView {
    fn from(dead: &DeadLetterRow) -> Self {
        Self {
            id: dead.row.id,
            message_id: dead.row.message_id,
            shard: ShardRef::of(&dead.row.shard),
            category: dead.row.category,
            object_identifier: dead.row.object_identifier,
            payload: dead.row.payload.clone(),
            error: dead.error.clone(),
            date_added: dead.row.date_added,
            dead_lettered_at: dead.dead_lettered_at,
        }
    }
}

/// `POST /dead-letters/replay` and `POST /dead-letters/discard`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayDeadLetters {
    /// The table.
    #[schema(value_type = String, example = "region")]
    pub kind: Kind,
    /// The rows (1 to 10,000).
    pub ids: Vec<i64>,
}

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

/// What holds vacuum's horizon back ([`outbox_core::store::HorizonHolder`]).
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HorizonHolderView {
    /// `session`, `prepared transaction` or `replication slot`.
    pub kind: String,
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

impl From<&outbox_core::store::HorizonHolder> for HorizonHolderView {
    fn from(holder: &outbox_core::store::HorizonHolder) -> Self {
        Self {
            kind: holder.kind.as_str().to_owned(),
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
pub(crate) fn remedy(holder: &outbox_core::store::HorizonHolder) -> String {
    use outbox_core::store::HorizonHolderKind;
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
    /// The scope's name.
    pub scope: String,
    /// Rows pending: `{"precision": "exact" | "at_least" | "estimated",
    /// "value": n}` (see [`Count`]).
    #[schema(value_type = CountSchema)]
    pub depth: Count,
    /// Age of its oldest pending row, in seconds.
    pub oldest_age_seconds: Option<f64>,
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
            dead_tuples: backlog.dead_tuples,
            oldest_transaction_age_seconds: backlog
                .oldest_transaction_age
                .map(|age| age.as_secs_f64()),
            horizon: backlog.horizon.as_ref().map(HorizonHolderView::from),
            dead_letters: backlog.dead_letters,
            scopes: backlog
                .scopes
                .iter()
                .map(|scope| ScopeBacklogView {
                    scope: scope.scope.clone(),
                    depth: scope.depth,
                    oldest_age_seconds: scope.oldest_age.map(|age| age.as_secs_f64()),
                })
                .collect(),
        }
    }
}

/// `GET /health`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HealthView {
    /// Per table.
    pub backlogs: Vec<BacklogView>,
    /// Runtime controls in force.
    pub controls: usize,
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
    /// The shard.
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

/// `?limit=100`.
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

/// One record of the operators' audit log (`GET /audit`), newest first.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditView {
    /// Increasing with each record.
    pub id: i64,
    /// When.
    pub at: DateTime<Utc>,
    /// Who (the principal's name; `cli:<user>` from the CLI).
    pub actor: String,
    /// In which role (`operator`, `viewer`, `cli`).
    pub role: String,
    /// What: `pause`, `cull`, `resume`, `retry`, `replay`, `discard`, or
    /// the method and route a viewer was refused.
    pub action: String,
    /// On what.
    pub target: Option<String>,
    /// The reason given.
    pub reason: Option<String>,
    /// `ok`, or the error code that refused or failed it.
    pub outcome: String,
    /// What it did, or why it was refused.
    pub detail: Option<String>,
}

impl From<&outbox_core::audit::AuditRecord> for AuditView {
    fn from(record: &outbox_core::audit::AuditRecord) -> Self {
        let entry = &record.entry;
        Self {
            id: record.id,
            at: entry.at,
            actor: entry.actor.clone(),
            role: entry.role.clone(),
            action: entry.action.clone(),
            target: entry.target.clone(),
            reason: entry.reason.clone(),
            outcome: entry.outcome.clone(),
            detail: entry.detail.clone(),
        }
    }
}

/// `GET /history`: one table's merged history samples, oldest first.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HistoryView {
    /// The table.
    #[schema(value_type = String, example = "region")]
    pub kind: Kind,
    /// How far back, in minutes.
    pub minutes: u32,
    /// One point per sampling time (every worker's samples merged).
    pub points: Vec<PointView>,
}

/// One point of [`HistoryView`].
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PointView {
    /// When.
    pub at: DateTime<Utc>,
    /// Rows pending.
    pub depth: u64,
    /// How long the oldest pending row had waited, in seconds.
    pub oldest_age_seconds: Option<f64>,
    /// Deliveries in the interval before it (all workers).
    pub delivered: u64,
    /// Failed deliveries in the interval before it.
    pub failed: u64,
    /// Rows dead-lettered in the interval before it.
    pub dead_lettered: u64,
    /// Rows in the dead-letter table.
    pub dead_letters: u64,
}

impl From<&outbox_core::history::Point> for PointView {
    fn from(point: &outbox_core::history::Point) -> Self {
        Self {
            at: point.at,
            depth: point.depth,
            oldest_age_seconds: point.oldest_age.map(|age| age.as_secs_f64()),
            delivered: point.delivered,
            failed: point.failed,
            dead_lettered: point.dead_lettered,
            dead_letters: point.dead_letters,
        }
    }
}

/// `?kind=region&minutes=60` of `GET /history`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HistoryQuery {
    #[serde(default = "region")]
    pub(crate) kind: Kind,
    #[serde(default = "sixty")]
    pub(crate) minutes: u32,
}

fn sixty() -> u32 {
    60
}

/// The longest history asked for: 7 days, in minutes.
pub(crate) const MAX_HISTORY_MINUTES: u32 = 7 * 24 * 60;

impl HistoryQuery {
    pub(crate) fn checked(self) -> Result<(Kind, u32), AdminError> {
        if self.minutes == 0 || self.minutes > MAX_HISTORY_MINUTES {
            return Err(AdminError::bad_request(format!(
                "`minutes` must be between 1 and {MAX_HISTORY_MINUTES}"
            )));
        }
        Ok((self.kind, self.minutes))
    }
}

/// `?limit=100` of `GET /audit`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditQuery {
    #[serde(default = "hundred")]
    pub(crate) limit: usize,
}

impl AuditQuery {
    pub(crate) fn checked(self) -> Result<usize, AdminError> {
        check_limit(self.limit)
    }
}

/// `?kind=region&limit=100`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    #[serde(default = "region")]
    pub(crate) kind: Kind,
    #[serde(default = "hundred")]
    pub(crate) limit: usize,
}

fn region() -> Kind {
    Kind::Region
}

fn hundred() -> usize {
    100
}

/// The largest `limit` and replay batch.
pub(crate) const MAX_LIMIT: usize = 10_000;

impl ListQuery {
    pub(crate) fn checked(self) -> Result<Self, AdminError> {
        check_limit(self.limit)?;
        Ok(self)
    }
}

/// A `limit` of a query: 1 to [`MAX_LIMIT`].
fn check_limit(limit: usize) -> Result<usize, AdminError> {
    if limit == 0 || limit > MAX_LIMIT {
        return Err(AdminError::bad_request(format!(
            "`limit` must be between 1 and {MAX_LIMIT}"
        )));
    }
    Ok(limit)
}

/// How the OpenAPI document shows a [`Count`]: `{"precision": "exact" |
/// "at_least" | "estimated", "value": n}`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CountSchema {
    /// `exact`, `at_least` (counted up to the cap) or `estimated` (from the
    /// planner's statistics).
    pub precision: String,
    /// The number.
    pub value: u64,
}
