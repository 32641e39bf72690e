//! The handlers.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use outbox_core::{Category, OutboxKind, ShardKey};

use super::error::{AdminError, AdminJson, AdminQuery};
use super::model::{
    AuditQuery, AuditView, BackfillView, BacklogView, ControlView, DeadLetterView, Discarded,
    FailingView, FenceView, FencesQuery, FencesView, HeadView, HealthView, HistoryQuery,
    HistoryView, LiftControl, ListQuery, PointView, ReplayDeadLetters, Replayed, Retried,
    RetryShards, SetAside, SetAsideDone, SetControl, ShardQuery, ShardRef, ShardView, ShardsView,
};
use super::ops::Actor;
use super::{ops, AdminState};

pub(super) async fn health<C: Category>(
    State(state): State<AdminState<C>>,
) -> Result<Json<HealthView>, AdminError> {
    let mut backlogs = Vec::new();
    let mut parked = Vec::new();
    for kind in OutboxKind::ALL {
        backlogs.push(BacklogView::from(&state.view.backlog(kind).await?));
        parked.extend(
            state
                .view
                .parked_shards(kind, super::model::PARKED_LISTED)
                .await?
                .iter()
                .map(FailingView::of::<C>),
        );
    }
    let controls = state.view.controls().await?.len();
    Ok(Json(HealthView {
        backlogs,
        controls,
        parked,
    }))
}

pub(super) async fn shards<C: Category>(
    State(state): State<AdminState<C>>,
    AdminQuery(query): AdminQuery<ListQuery>,
) -> Result<Json<ShardsView>, AdminError> {
    let query = query.checked()?;
    // One transaction: the counts and lists agree.
    let snapshot = state.view.snapshot(query.kind, query.limit).await?;
    Ok(Json(ShardsView {
        kind: query.kind,
        pending: snapshot.pending,
        dead_letters: snapshot.dead_letters,
        shards: snapshot
            .deepest
            .iter()
            .map(|depth| ShardView::of::<C>(depth, &snapshot.failing))
            .collect(),
        failing: snapshot
            .failing
            .iter()
            .filter(|f| !f.state.is_paused())
            .map(FailingView::of::<C>)
            .collect(),
        paused: snapshot
            .failing
            .iter()
            .filter(|f| f.state.is_paused())
            .map(FailingView::of::<C>)
            .collect(),
    }))
}

pub(super) async fn retry<C: Category>(
    State(state): State<AdminState<C>>,
    Actor(actor): Actor,
    AdminJson(request): AdminJson<RetryShards>,
) -> Result<Json<Retried>, AdminError> {
    let shards = request
        .shards
        .iter()
        .map(ShardRef::key::<C>)
        .collect::<Result<Vec<ShardKey>, _>>()?;
    Ok(Json(ops::retry(&state, &actor, shards).await?))
}

pub(super) async fn controls<C: Category>(
    State(state): State<AdminState<C>>,
) -> Result<Json<Vec<ControlView>>, AdminError> {
    let controls = state.view.controls().await?;
    Ok(Json(controls.iter().map(ControlView::of::<C>).collect()))
}

pub(super) async fn set_control<C: Category>(
    State(state): State<AdminState<C>>,
    Actor(actor): Actor,
    AdminJson(request): AdminJson<SetControl>,
) -> Result<Json<ControlView>, AdminError> {
    let target = request.target.target::<C>()?;
    let control = ops::set_control(
        &state,
        &actor,
        target,
        request.action.into(),
        request.reason,
    )
    .await?;
    Ok(Json(control))
}

pub(super) async fn lift_control<C: Category>(
    State(state): State<AdminState<C>>,
    Actor(actor): Actor,
    AdminJson(request): AdminJson<LiftControl>,
) -> Result<StatusCode, AdminError> {
    ops::lift_control(&state, &actor, &request.target.target::<C>()?).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn dead_letters<C: Category>(
    State(state): State<AdminState<C>>,
    AdminQuery(query): AdminQuery<ListQuery>,
) -> Result<Json<Vec<DeadLetterView>>, AdminError> {
    let query = query.checked()?;
    let rows = state.view.dead_letters(query.kind, query.limit).await?;
    Ok(Json(rows.iter().map(DeadLetterView::of::<C>).collect()))
}

pub(super) async fn replay<C: Category>(
    State(state): State<AdminState<C>>,
    Actor(actor): Actor,
    AdminJson(request): AdminJson<ReplayDeadLetters>,
) -> Result<Json<Replayed>, AdminError> {
    let replayed = ops::replay(&state, &actor, request.kind, &request.ids).await?;
    Ok(Json(Replayed { replayed }))
}

pub(super) async fn discard<C: Category>(
    State(state): State<AdminState<C>>,
    Actor(actor): Actor,
    AdminJson(request): AdminJson<ReplayDeadLetters>,
) -> Result<Json<Discarded>, AdminError> {
    let discarded = ops::discard(&state, &actor, request.kind, &request.ids).await?;
    Ok(Json(Discarded { discarded }))
}

pub(super) async fn backfills<C: Category>(
    State(state): State<AdminState<C>>,
) -> Result<Json<Vec<BackfillView>>, AdminError> {
    let Some(backfill) = &state.backfill else {
        return Err(AdminError::not_found(
            "no_backfill",
            "this admin API was built without a backfill (`Admin::backfill`)",
        ));
    };
    let statuses = backfill.status().await.map_err(|error| {
        AdminError::logged(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            "the backfill cursors could not be read",
            &error,
        )
    })?;
    Ok(Json(statuses.iter().map(BackfillView::from).collect()))
}

pub(super) async fn fences<C: Category>(
    State(state): State<AdminState<C>>,
    AdminQuery(query): AdminQuery<FencesQuery>,
) -> Result<Json<FencesView>, AdminError> {
    let Some(db) = &state.inbox else {
        return Err(AdminError::not_found(
            "no_inbox",
            "this admin API was built without the receivers' database (`Admin::inbox`)",
        ));
    };
    let limit = query.checked()?;
    let (records, superseded) = outbox_seaorm::inbox::fences(db, limit)
        .await
        .map_err(|error| {
            AdminError::logged(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "the fence records could not be read",
                &error,
            )
        })?;
    Ok(Json(FencesView {
        superseded,
        records: records.iter().map(FenceView::from).collect(),
    }))
}

pub(super) async fn audit<C: Category>(
    State(state): State<AdminState<C>>,
    AdminQuery(query): AdminQuery<AuditQuery>,
) -> Result<Json<Vec<AuditView>>, AdminError> {
    let limit = query.checked()?;
    let records = state.view.audit_log(limit).await?;
    Ok(Json(records.iter().map(AuditView::from).collect()))
}

pub(super) async fn history<C: Category>(
    State(state): State<AdminState<C>>,
    AdminQuery(query): AdminQuery<HistoryQuery>,
) -> Result<Json<HistoryView>, AdminError> {
    let (kind, minutes) = query.checked()?;
    let span = std::time::Duration::from_secs(u64::from(minutes) * 60);
    let samples = state.view.history(kind, span).await?;
    Ok(Json(HistoryView {
        kind,
        minutes,
        points: outbox_core::history::points(&samples, kind)
            .iter()
            .map(PointView::from)
            .collect(),
    }))
}

pub(super) async fn head<C: Category>(
    State(state): State<AdminState<C>>,
    AdminQuery(query): AdminQuery<ShardQuery>,
) -> Result<Json<HeadView>, AdminError> {
    let shard = query.key::<C>()?;
    match state.view.head(&shard).await? {
        Some(head) => Ok(Json(HeadView::of::<C>(&head))),
        None => Err(AdminError::not_found(
            "no_pending_rows",
            format!("{shard} has no pending row"),
        )),
    }
}

pub(super) async fn set_aside<C: Category>(
    State(state): State<AdminState<C>>,
    Actor(actor): Actor,
    AdminJson(request): AdminJson<SetAside>,
) -> Result<Json<SetAsideDone>, AdminError> {
    let shard = request.shard.key::<C>()?;
    let ids = ops::set_aside(&state, &actor, shard.clone(), request.reason).await?;
    Ok(Json(SetAsideDone {
        shard: ShardRef::of::<C>(&shard),
        ids,
    }))
}

/// Prometheus's text exposition format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4";

pub(super) async fn asyncapi<C: Category>(
    State(state): State<AdminState<C>>,
) -> Json<serde_json::Value> {
    Json(outbox_core::asyncapi::document::<C>(&state.asyncapi))
}

pub(super) async fn metrics<C: Category>(
    State(state): State<AdminState<C>>,
) -> Result<Response, AdminError> {
    let Some(render) = &state.metrics else {
        return Err(AdminError::not_found(
            "no_metrics",
            "this admin API was built without metrics (`Admin::metrics`)",
        ));
    };
    let content_type = HeaderValue::from_static(PROMETHEUS_TEXT);
    Ok(([(CONTENT_TYPE, content_type)], render()).into_response())
}
