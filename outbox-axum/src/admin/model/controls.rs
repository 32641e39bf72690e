//! `GET /controls`, `PUT /controls` and `DELETE /controls`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use outbox_core::{Category, ControlAction, RuntimeControl};

use super::target::TargetRef;

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

impl ControlView {
    /// `control`, its scope named by `C`'s registry.
    pub(crate) fn of<C: Category>(control: &RuntimeControl) -> Self {
        Self {
            target: TargetRef::of::<C>(&control.target),
            action: control.action.into(),
            reason: control.reason.clone(),
            created_at: control.created_at,
        }
    }
}
