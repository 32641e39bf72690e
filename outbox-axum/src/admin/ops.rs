//! What the admin routes do, shared by the JSON API and the dashboard's
//! forms: each checks its input and answers an [`AdminError`] that says
//! what was wrong, having changed nothing; and each records who asked for
//! what and how it ended in the audit log (refusals too).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;

use outbox_core::audit::AuditEntry;
use outbox_core::{Category, ControlAction, ControlTarget, OutboxKind, ShardKey};

use super::auth::Principal;
use super::error::AdminError;
use super::labels::{control_target_label, ids_label, shards_label};
use super::model::{ControlView, Retried, ShardRef, MAX_LIMIT};
use super::AdminState;

/// Who asked: the [`Principal`] the authoriser put in the request's
/// extensions (behind a layer of your own that put none, an operator
/// recorded as `unnamed`).
#[derive(Clone, Debug)]
pub(crate) struct Actor(pub(crate) Principal);

impl<S: Send + Sync> FromRequestParts<S> for Actor {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(
            parts
                .extensions
                .get::<Principal>()
                .cloned()
                .unwrap_or_else(Principal::unnamed),
        ))
    }
}

/// What an action was, for its audit record.
pub(crate) struct Audit<'a> {
    pub(crate) actor: &'a Principal,
    pub(crate) action: &'static str,
    pub(crate) target: Option<String>,
    pub(crate) reason: Option<String>,
}

/// Records `audit` with `outcome` (`detail` says what an `Ok` did). A
/// failure to record is logged, not returned: the action has happened.
pub(crate) async fn record<C: Category, T>(
    state: &AdminState<C>,
    audit: Audit<'_>,
    outcome: &Result<T, AdminError>,
    detail: impl FnOnce(&T) -> String,
) {
    let mut entry = AuditEntry::new(
        state.view.now(),
        audit.actor.name(),
        audit.actor.role().as_str(),
        audit.action,
    );
    entry.target = audit.target;
    entry.reason = audit.reason;
    match outcome {
        Ok(done) => entry.detail = Some(detail(done)),
        Err(error) => {
            entry.outcome = error.code.to_owned();
            entry.detail = Some(error.message.clone());
        }
    }
    if let Err(error) = state.operator.record(&entry, state.audit_retention).await {
        tracing::error!(%error, actor = audit.actor.name(), action = audit.action, "outbox admin: the action could not be recorded in the audit log");
    }
}

/// How long a reason may be.
const REASON_MAX: usize = 1000;

/// Makes failing, paused or quarantined shards due at once; unknown shards
/// (not failing) are refused, all of them before any is touched.
pub(super) async fn retry<C: Category>(
    state: &AdminState<C>,
    actor: &Principal,
    shards: Vec<ShardKey>,
) -> Result<Retried, AdminError> {
    let target = Some(shards_label::<C>(&shards));
    let outcome = retry_shards(state, shards).await;
    let audit = Audit {
        actor,
        action: "retry",
        target,
        reason: None,
    };
    record(state, audit, &outcome, |retried| {
        format!(
            "released {}, held {}",
            retried.released.len(),
            retried.held.len()
        )
    })
    .await;
    outcome
}

async fn retry_shards<C: Category>(
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
            .map(ShardRef::of::<C>)
            .collect(),
        released: released.iter().map(ShardRef::of::<C>).collect(),
    })
}

/// Pauses or culls `target`, for every process within a refresh.
pub(super) async fn set_control<C: Category>(
    state: &AdminState<C>,
    actor: &Principal,
    target: ControlTarget,
    action: ControlAction,
    reason: Option<String>,
) -> Result<ControlView, AdminError> {
    let audit = Audit {
        actor,
        action: match action {
            ControlAction::Pause => "pause",
            ControlAction::Cull => "cull",
        },
        target: Some(control_target_label::<C>(&target)),
        reason: reason.clone(),
    };
    let outcome = control(state, target, action, reason).await;
    record(state, audit, &outcome, |_| "set".to_owned()).await;
    outcome
}

async fn control<C: Category>(
    state: &AdminState<C>,
    target: ControlTarget,
    action: ControlAction,
    reason: Option<String>,
) -> Result<ControlView, AdminError> {
    checked_reason(reason.as_deref())?;
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
    Ok(ControlView::of::<C>(control))
}

/// Lifts the control on `target`; its paused shards are due at once.
pub(super) async fn lift_control<C: Category>(
    state: &AdminState<C>,
    actor: &Principal,
    target: &ControlTarget,
) -> Result<(), AdminError> {
    let outcome = lift(state, target).await;
    let audit = Audit {
        actor,
        action: "resume",
        target: Some(control_target_label::<C>(target)),
        reason: None,
    };
    record(state, audit, &outcome, |()| "lifted".to_owned()).await;
    outcome
}

async fn lift<C: Category>(
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
    actor: &Principal,
    kind: OutboxKind,
    ids: &[i64],
) -> Result<u64, AdminError> {
    let outcome = replay_ids(state, kind, ids).await;
    let audit = Audit {
        actor,
        action: "replay",
        target: Some(ids_label(kind, ids)),
        reason: None,
    };
    record(state, audit, &outcome, |count| format!("replayed {count}")).await;
    outcome
}

async fn replay_ids<C: Category>(
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
    actor: &Principal,
    kind: OutboxKind,
    ids: &[i64],
) -> Result<u64, AdminError> {
    let outcome = discard_ids(state, kind, ids).await;
    let audit = Audit {
        actor,
        action: "discard",
        target: Some(ids_label(kind, ids)),
        reason: None,
    };
    record(state, audit, &outcome, |count| format!("discarded {count}")).await;
    outcome
}

async fn discard_ids<C: Category>(
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

/// Moves `shard`'s head message (its coalescing group) to the dead letters
/// so that the rest of the shard flows: 404 when nothing of it is pending,
/// 409 while a worker holds it (nothing moved; try again).
pub(super) async fn set_aside<C: Category>(
    state: &AdminState<C>,
    actor: &Principal,
    shard: ShardKey,
    reason: Option<String>,
) -> Result<Vec<i64>, AdminError> {
    let audit = Audit {
        actor,
        action: "set_aside",
        target: Some(shards_label::<C>(std::slice::from_ref(&shard))),
        reason: reason.clone(),
    };
    let outcome = set_aside_head(state, actor, &shard, reason).await;
    record(state, audit, &outcome, |ids| {
        format!("moved {} row(s) to the dead letters: {ids:?}", ids.len())
    })
    .await;
    outcome
}

async fn set_aside_head<C: Category>(
    state: &AdminState<C>,
    actor: &Principal,
    shard: &ShardKey,
    reason: Option<String>,
) -> Result<Vec<i64>, AdminError> {
    checked_reason(reason.as_deref())?;
    let Some(head) = state.view.head(shard).await? else {
        return Err(AdminError::not_found(
            "no_pending_rows",
            format!("{shard} has no pending row"),
        ));
    };
    let error = format!(
        "set aside by {}{}",
        actor.name(),
        reason
            .map(|reason| format!(": {reason}"))
            .unwrap_or_default()
    );
    match state.operator.set_aside(shard, &head.group, &error).await? {
        None => Err(AdminError::new(
            StatusCode::CONFLICT,
            "shard_held",
            "a worker is delivering this shard right now; try again in a moment",
        )),
        Some(_) => {
            tracing::info!(%shard, ids = ?head.group, "outbox head message set aside by an operator");
            state.wake();
            Ok(head.group)
        }
    }
}

/// At most `REASON_MAX` characters, without NUL.
fn checked_reason(reason: Option<&str>) -> Result<(), AdminError> {
    if reason.is_some_and(|reason| reason.chars().count() > REASON_MAX || reason.contains('\0')) {
        return Err(AdminError::bad_request(format!(
            "`reason` takes at most {REASON_MAX} characters, without NUL"
        )));
    }
    Ok(())
}
