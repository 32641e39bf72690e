//! How the OpenAPI document shows a count.

use serde::{Deserialize, Serialize};

/// How the OpenAPI document shows a [`Count`](outbox_core::Count):
/// `{"precision": "exact" | "at_least" | "estimated", "value": n}`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CountSchema {
    /// `exact`, `at_least` (counted up to the cap) or `estimated` (from the
    /// planner's statistics).
    pub precision: String,
    /// The number.
    pub value: u64,
}
