//! `GET /dead-letters`, `POST /dead-letters/replay` and
//! `POST /dead-letters/discard`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use outbox_core::store::DeadLetterRow;
use outbox_core::Category;

use super::target::{category_name, ShardRef};
use super::Kind;

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
    /// Its category's declared name (`null` for one this binary does not
    /// know).
    pub category_name: Option<String>,
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

impl DeadLetterView {
    /// `dead`, its scope and category named by `C`'s registry.
    pub(crate) fn of<C: Category>(dead: &DeadLetterRow) -> Self {
        Self {
            id: dead.row.id,
            message_id: dead.row.message_id,
            shard: ShardRef::of::<C>(&dead.row.shard),
            category: dead.row.category,
            category_name: category_name::<C>(dead.row.category),
            object_identifier: dead.row.object_identifier,
            payload: dead
                .row
                .payload
                .as_ref()
                .map(outbox_core::Payload::to_value_or_text),
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
