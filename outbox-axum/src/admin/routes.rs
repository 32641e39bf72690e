//! The handlers.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use outbox_core::{Category, OutboxKind, ShardKey};

use super::error::{AdminError, AdminJson, AdminQuery};
use super::model::{
    BacklogView, ControlView, DeadLetterView, FailingView, HealthView, LiftControl, ListQuery,
    ReplayDeadLetters, Retried, RetryShards, SetControl, ShardRef, ShardView, ShardsView,
    StateView, MAX_LIMIT,
};
use super::AdminState;

/// How long a reason may be.
const REASON_MAX: usize = 1000;

pub(super) async fn health<C: Category>(
    State(state): State<AdminState<C>>,
) -> Result<Json<HealthView>, AdminError> {
    let drainer = &state.drainer;
    let mut backlogs = Vec::new();
    for kind in OutboxKind::ALL {
        backlogs.push(BacklogView::from(&drainer.backlog(kind).await?));
    }
    let controls = drainer.admin().controls().await?.len();
    Ok(Json(HealthView { backlogs, controls }))
}

pub(super) async fn shards<C: Category>(
    State(state): State<AdminState<C>>,
    AdminQuery(query): AdminQuery<ListQuery>,
) -> Result<Json<ShardsView>, AdminError> {
    let drainer = &state.drainer;
    let query = query.checked()?;
    // One transaction: the counts and lists agree.
    let snapshot = drainer
        .admin()
        .snapshot(OutboxKind::from(query.kind), query.limit)
        .await?;
    Ok(Json(ShardsView {
        kind: query.kind,
        pending: snapshot.pending,
        dead_letters: snapshot.dead_letters,
        shards: snapshot
            .deepest
            .iter()
            .map(|depth| ShardView::of(depth, &snapshot.failing))
            .collect(),
        failing: snapshot
            .failing
            .iter()
            .map(|f| FailingView {
                shard: ShardRef::of(&f.shard),
                state: StateView::from(&f.state),
            })
            .collect(),
    }))
}

pub(super) async fn retry<C: Category>(
    State(state): State<AdminState<C>>,
    AdminJson(request): AdminJson<RetryShards>,
) -> Result<Json<Retried>, AdminError> {
    let drainer = &state.drainer;
    if request.shards.is_empty() || request.shards.len() > MAX_LIMIT {
        return Err(AdminError::bad_request(format!(
            "give 1 to {MAX_LIMIT} shards"
        )));
    }
    let shards = request
        .shards
        .iter()
        .map(ShardRef::key)
        .collect::<Result<Vec<ShardKey>, _>>()?;
    // Only shards with a failure state: anything else is a typo.
    for kind in OutboxKind::ALL {
        let wanted: Vec<&ShardKey> = shards.iter().filter(|s| s.kind() == kind).collect();
        if wanted.is_empty() {
            continue;
        }
        let failing = drainer.admin().failing_shards(kind, MAX_LIMIT).await?;
        if let Some(unknown) = wanted
            .iter()
            .find(|shard| !failing.iter().any(|f| &&f.shard == *shard))
        {
            return Err(AdminError::not_found(
                "unknown_shard",
                format!("{unknown} is not failing, paused or quarantined"),
            ));
        }
    }
    // A worker may hold a shard's bucket for a moment (it meets the
    // quarantined shard, leaves it, releases the bucket): ask again for up
    // to a second.
    let mut released = Vec::new();
    let mut left = shards.clone();
    for attempt in 0..20 {
        if attempt > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let now_released = drainer.admin().retry_now(&left, drainer.now()).await?;
        left.retain(|shard| !now_released.contains(shard));
        released.extend(now_released);
        if left.is_empty() {
            break;
        }
    }
    tracing::info!(
        released = released.len(),
        held = left.len(),
        "outbox shards retried by an operator"
    );
    state.wake();
    Ok(Json(Retried {
        held: shards
            .iter()
            .filter(|shard| !released.contains(shard))
            .map(ShardRef::of)
            .collect(),
        released: released.iter().map(ShardRef::of).collect(),
    }))
}

pub(super) async fn controls<C: Category>(
    State(state): State<AdminState<C>>,
) -> Result<Json<Vec<ControlView>>, AdminError> {
    let drainer = &state.drainer;
    let controls = drainer.admin().controls().await?;
    Ok(Json(controls.iter().map(ControlView::from).collect()))
}

pub(super) async fn set_control<C: Category>(
    State(state): State<AdminState<C>>,
    AdminJson(request): AdminJson<SetControl>,
) -> Result<Json<ControlView>, AdminError> {
    let drainer = &state.drainer;
    let target = request.target.target()?;
    if request
        .reason
        .as_ref()
        .is_some_and(|reason| reason.chars().count() > REASON_MAX || reason.contains('\0'))
    {
        return Err(AdminError::bad_request(format!(
            "`reason` takes at most {REASON_MAX} characters, without NUL"
        )));
    }
    match request.action {
        super::model::Action::Pause => drainer.pause(target.clone(), request.reason).await?,
        super::model::Action::Cull => drainer.cull(target.clone(), request.reason).await?,
    }
    let controls = drainer.admin().controls().await?;
    let control = controls
        .iter()
        .find(|control| control.target == target)
        .ok_or_else(|| {
            AdminError::new(
                StatusCode::CONFLICT,
                "changed_meanwhile",
                "the control was lifted by another request meanwhile",
            )
        })?;
    Ok(Json(ControlView::from(control)))
}

pub(super) async fn lift_control<C: Category>(
    State(state): State<AdminState<C>>,
    AdminJson(request): AdminJson<LiftControl>,
) -> Result<StatusCode, AdminError> {
    let drainer = &state.drainer;
    let target = request.target.target()?;
    if drainer.resume(&target).await? {
        state.wake();
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(AdminError::not_found(
            "unknown_control",
            "no pause or cull is set on this target",
        ))
    }
}

pub(super) async fn dead_letters<C: Category>(
    State(state): State<AdminState<C>>,
    AdminQuery(query): AdminQuery<ListQuery>,
) -> Result<Json<Vec<DeadLetterView>>, AdminError> {
    let drainer = &state.drainer;
    let query = query.checked()?;
    let rows = drainer
        .admin()
        .dead_letters(query.kind.into(), query.limit)
        .await?;
    Ok(Json(rows.iter().map(DeadLetterView::from).collect()))
}

pub(super) async fn replay<C: Category>(
    State(state): State<AdminState<C>>,
    AdminJson(request): AdminJson<ReplayDeadLetters>,
) -> Result<Json<serde_json::Value>, AdminError> {
    checked_ids(&request)?;
    let replayed = state
        .drainer
        .admin()
        .replay_dead_letters(request.kind.into(), &request.ids)
        .await?;
    state.wake();
    found_dead_letters(replayed)?;
    Ok(Json(serde_json::json!({ "replayed": replayed })))
}

pub(super) async fn discard<C: Category>(
    State(state): State<AdminState<C>>,
    AdminJson(request): AdminJson<ReplayDeadLetters>,
) -> Result<Json<serde_json::Value>, AdminError> {
    checked_ids(&request)?;
    let discarded = state
        .drainer
        .admin()
        .discard_dead_letters(request.kind.into(), &request.ids)
        .await?;
    found_dead_letters(discarded)?;
    tracing::info!(discarded, "outbox dead letters discarded by an operator");
    Ok(Json(serde_json::json!({ "discarded": discarded })))
}

/// 1 to `MAX_LIMIT` dead-letter ids.
fn checked_ids(request: &ReplayDeadLetters) -> Result<(), AdminError> {
    if request.ids.is_empty() || request.ids.len() > MAX_LIMIT {
        return Err(AdminError::bad_request(format!(
            "give 1 to {MAX_LIMIT} ids"
        )));
    }
    Ok(())
}

/// 404 when none of the ids was a dead letter.
fn found_dead_letters(count: u64) -> Result<(), AdminError> {
    if count == 0 {
        return Err(AdminError::not_found(
            "unknown_dead_letters",
            "none of these ids is a dead letter of this table",
        ));
    }
    Ok(())
}
