//! What the admin routes do, shared by the JSON API and the dashboard's
//! forms: each checks its input and answers an [`AdminError`] that says
//! what was wrong, having changed nothing.

use axum::http::StatusCode;

use outbox_core::{Category, ControlAction, ControlTarget, OutboxKind, ShardKey};

use super::error::AdminError;
use super::model::{ControlView, Retried, ShardRef, MAX_LIMIT};
use super::AdminState;

/// How long a reason may be.
const REASON_MAX: usize = 1000;

/// Makes failing, paused or quarantined shards due at once; unknown shards
/// (not failing) are refused, all of them before any is touched.
pub(super) async fn retry<C: Category>(
    state: &AdminState<C>,
    shards: Vec<ShardKey>,
) -> Result<Retried, AdminError> {
    if shards.is_empty() || shards.len() > MAX_LIMIT {
        return Err(AdminError::bad_request(format!(
            "give 1 to {MAX_LIMIT} shards"
        )));
    }
    // Only shards with a failure state: anything else is a typo.
    for kind in OutboxKind::ALL {
        let wanted: Vec<&ShardKey> = shards.iter().filter(|s| s.kind() == kind).collect();
        if wanted.is_empty() {
            continue;
        }
        let failing = state.view.failing_shards(kind, MAX_LIMIT).await?;
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
    let released = state.operator.retry_now(&shards).await?;
    tracing::info!(
        released = released.len(),
        held = shards.len() - released.len(),
        "outbox shards retried by an operator"
    );
    state.wake();
    Ok(Retried {
        held: shards
            .iter()
            .filter(|shard| !released.contains(shard))
            .map(ShardRef::of)
            .collect(),
        released: released.iter().map(ShardRef::of).collect(),
    })
}

/// Pauses or culls `target`, for every process within a refresh.
pub(super) async fn set_control<C: Category>(
    state: &AdminState<C>,
    target: ControlTarget,
    action: ControlAction,
    reason: Option<String>,
) -> Result<ControlView, AdminError> {
    if reason
        .as_ref()
        .is_some_and(|reason| reason.chars().count() > REASON_MAX || reason.contains('\0'))
    {
        return Err(AdminError::bad_request(format!(
            "`reason` takes at most {REASON_MAX} characters, without NUL"
        )));
    }
    match action {
        ControlAction::Pause => state.operator.pause(target.clone(), reason).await?,
        ControlAction::Cull => state.operator.cull(target.clone(), reason).await?,
    }
    tracing::info!(?target, ?action, "outbox control set by an operator");
    let controls = state.view.controls().await?;
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
    Ok(ControlView::from(control))
}

/// Lifts the control on `target`; its paused shards are due at once.
pub(super) async fn lift_control<C: Category>(
    state: &AdminState<C>,
    target: &ControlTarget,
) -> Result<(), AdminError> {
    if state.operator.resume(target).await? {
        tracing::info!(?target, "outbox control lifted by an operator");
        state.wake();
        Ok(())
    } else {
        Err(AdminError::not_found(
            "unknown_control",
            "no pause or cull is set on this target",
        ))
    }
}

/// Puts dead letters back in the outbox; how many were.
pub(super) async fn replay<C: Category>(
    state: &AdminState<C>,
    kind: OutboxKind,
    ids: &[i64],
) -> Result<u64, AdminError> {
    checked_ids(ids)?;
    let replayed = state.operator.replay_dead_letters(kind, ids).await?;
    state.wake();
    found_dead_letters(replayed)?;
    tracing::info!(replayed, "outbox dead letters replayed by an operator");
    Ok(replayed)
}

/// Deletes dead letters for good; how many were.
pub(super) async fn discard<C: Category>(
    state: &AdminState<C>,
    kind: OutboxKind,
    ids: &[i64],
) -> Result<u64, AdminError> {
    checked_ids(ids)?;
    let discarded = state.operator.discard_dead_letters(kind, ids).await?;
    found_dead_letters(discarded)?;
    tracing::info!(discarded, "outbox dead letters discarded by an operator");
    Ok(discarded)
}

/// 1 to `MAX_LIMIT` dead-letter ids.
fn checked_ids(ids: &[i64]) -> Result<(), AdminError> {
    if ids.is_empty() || ids.len() > MAX_LIMIT {
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
