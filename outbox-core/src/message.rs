//! Stored rows and the messages handed to receivers.

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::fence_token::FencingToken;
use crate::payload::Payload;
use crate::registry::Category;
use crate::shard::{OutboxKind, ShardKey};
use crate::trace::TraceParent;

/// An outbox row as a [`Store`](crate::store::Store) reads it. Categories are raw
/// integers here: a row may carry one this binary does not know.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredRow {
    /// Primary key; order within the shard.
    pub id: i64,
    /// The message id: a UUID v7 assigned when the row was written, kept
    /// by dead-lettering and replay (see [`derived_message_id`] for rows
    /// written without one).
    pub message_id: Uuid,
    /// The row's shard.
    pub shard: ShardKey,
    /// The stored category value.
    pub category: i32,
    /// The object the row is about; with the category, the coalescing group.
    pub object_identifier: i64,
    /// What the receiver needs: JSON, parsed when asked ([`Payload`]).
    pub payload: Option<Payload>,
    /// When `scheduled_for` was last set.
    pub scheduled_from: DateTime<Utc>,
    /// When the row is due.
    pub scheduled_for: DateTime<Utc>,
    /// When the row was written.
    pub date_added: DateTime<Utc>,
    /// The trace context of the span that wrote the row, if any (a stored
    /// value that does not parse is read as `None`; see [`crate::trace`]).
    pub traceparent: Option<TraceParent>,
    /// The version of the payload's contract the writer stored, for a
    /// typed category (see [`crate::registry::contract`]); `None` for an untyped
    /// write (read as version 1 by typed receivers).
    pub payload_version: Option<u32>,
}

/// One delivery: the newest row of a coalescing group, as a receiver sees it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Message<C> {
    /// The id of the delivered row: the highest id of its group in this read.
    pub id: i64,
    /// The message id of the delivered row (a UUID v7 assigned when it was
    /// written): the same on every delivery of that row, so a receiver
    /// that records it (an inbox, a broker's de-duplication) applies each
    /// message once. Coalescing keeps the id of the row that won: a newer
    /// row of the group is a new message, with its own id.
    pub message_id: Uuid,
    /// The lowest id of the group that this delivery acknowledges.
    pub first_id: i64,
    /// How many rows this delivery acknowledges (1 when nothing was coalesced).
    pub coalesced: usize,
    /// The shard.
    pub shard: ShardKey,
    /// The fencing token of the claim that read the message: it only grows
    /// per shard, so a receiver that keeps the highest one it applied for
    /// the shard refuses a delivery from a worker that lost its claim (see
    /// [`crate::fence`]).
    pub fence: FencingToken,
    /// The category.
    pub category: C,
    /// The object the message is about.
    pub object_identifier: i64,
    /// The newest payload of the group: JSON, parsed when asked
    /// ([`payload_as`](Self::payload_as), [`Payload::deserialize`]).
    pub payload: Option<Payload>,
    /// When the group's oldest row was written.
    pub date_added: DateTime<Utc>,
    /// When the delivered row was due.
    pub scheduled_for: DateTime<Utc>,
    /// When the delivered row's schedule was last set.
    pub scheduled_from: DateTime<Utc>,
    /// Whether this delivery is a synchronous flush after a commit (as opposed
    /// to the background drain).
    pub synchronous: bool,
    /// The trace context of the span that wrote the delivered row, if any:
    /// the OpenTelemetry parent of the delivery span (see [`crate::trace`]).
    pub traceparent: Option<TraceParent>,
    /// The payload's contract version, as the delivered row's writer stored
    /// it: `None` for an untyped write (see [`crate::registry::contract`]).
    pub payload_version: Option<u32>,
}

impl<C: Category> Message<C> {
    /// The outbox table the message came from.
    pub fn kind(&self) -> OutboxKind {
        self.shard.kind()
    }

    /// The shard identifier (e.g. the organization id).
    pub fn shard_identifier(&self) -> i64 {
        self.shard.identifier()
    }

    /// The target region of a control-outbox message.
    pub fn region_name(&self) -> Option<&str> {
        self.shard.region_name()
    }

    /// The scope of the message's category.
    pub fn scope(&self) -> C::Scope {
        self.category.scope()
    }

    /// Decodes the payload into `T`.
    ///
    /// # Errors
    ///
    /// [`PayloadError::Missing`] when the row has no payload, and
    /// [`PayloadError::Malformed`] when it does not decode into `T`.
    pub fn payload_as<T: DeserializeOwned>(&self) -> Result<T, PayloadError> {
        let payload = self.payload.as_ref().ok_or(PayloadError::Missing {
            category: self.category.name(),
            id: self.id,
        })?;
        payload
            .deserialize()
            .map_err(|source| PayloadError::Malformed {
                category: self.category.name(),
                id: self.id,
                expected: std::any::type_name::<T>(),
                source,
            })
    }
}

/// A payload that a receiver could not decode. Returned from a receiver, it
/// fails the delivery, which holds the shard with backoff: nothing is lost.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// The row has no payload but the receiver needs one.
    #[error("outbox message {id} ({category}) has no payload; the writer must set one")]
    Missing {
        /// Category name.
        category: &'static str,
        /// Row id.
        id: i64,
    },
    /// The payload does not have the expected shape.
    #[error("outbox message {id} ({category}) has a payload that is not a `{expected}`: {source}")]
    Malformed {
        /// Category name.
        category: &'static str,
        /// Row id.
        id: i64,
        /// The Rust type the receiver asked for.
        expected: &'static str,
        /// The decoding error.
        source: serde_json::Error,
    },
}

crate::error_debug::debug_with_message!(PayloadError { Missing, Malformed });

tokio::task_local! {
    /// The delivery whose handler runs on this task.
    static DELIVERED: CurrentDelivery;
}

/// What identifies the delivery whose receiver is running on this task
/// ([`current_delivery`]): what a receiver that calls another service
/// forwards (for example as headers), so that the service applies the
/// message once (its id) and never after a newer claim of its shard (the
/// fencing token).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CurrentDelivery {
    /// The message id ([`Message::message_id`]).
    pub message_id: Uuid,
    /// The shard ([`Message::shard`]).
    pub shard: ShardKey,
    /// The claim's fencing token ([`Message::fence`]).
    pub fence: FencingToken,
    /// The category's name.
    pub category: &'static str,
}

/// The message id of the message whose receiver is running on this task,
/// if any: for code a few calls below a receiver that has no [`Message`]
/// at hand, such as an RPC client that forwards the id to the service that
/// applies the change (which records it in its inbox), or a replication
/// handler. `None` outside a delivery, and in tasks a receiver spawns.
///
/// ```
/// # outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 } }
/// use outbox_core::{message::current_message_id, MemoryStore, Drainer, Message, Receivers, ShardKey};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = MemoryStore::new();
/// let shard = ShardKey::region(OutboxScope::OrgScope, 7);
/// let id = store.write(&shard, OutboxCategory::OrgUpdate, 70, None);
/// let receivers = Receivers::new().on(OutboxCategory::OrgUpdate, |message: Message<OutboxCategory>| async move {
///     assert_eq!(current_message_id(), Some(message.message_id));
///     Ok::<_, outbox_core::HandlerError>(())
/// });
/// Drainer::new(store, receivers).drain_shard(&shard, Some(id)).await.unwrap();
/// assert_eq!(current_message_id(), None);
/// # }
/// ```
pub fn current_message_id() -> Option<Uuid> {
    DELIVERED.try_with(|delivery| delivery.message_id).ok()
}

/// The delivery whose receiver is running on this task, if any: its
/// message id, shard, fencing token and category. Like
/// [`current_message_id`], set for the receiver's call and the tasks it
/// awaits, not for tasks it spawns.
pub fn current_delivery() -> Option<CurrentDelivery> {
    DELIVERED.try_with(Clone::clone).ok()
}

/// Runs `future` (a receiver's call) with `delivery` as the current one.
pub(crate) async fn with_delivery<F: std::future::Future>(
    delivery: CurrentDelivery,
    future: F,
) -> F::Output {
    DELIVERED.scope(delivery, future).await
}

/// The message id of a row stored without one: written by hand, by a
/// binary older than the `message_id` column during a rolling deploy, or by
/// bulk SQL. Derived from what identifies the row, so every delivery of the
/// row carries the same id: a UUID v8 whose first 48 bits are the row's
/// `date_added` in Unix milliseconds (so it sorts by time like a v7 id),
/// then the outbox table and the row id.
///
/// ```
/// use chrono::{TimeZone, Utc};
/// use outbox_core::message::derived_message_id;
/// use outbox_core::OutboxKind;
///
/// let added = Utc.with_ymd_and_hms(2026, 11, 24, 9, 0, 0).unwrap();
/// let id = derived_message_id(OutboxKind::Region, 42, added);
/// assert_eq!(id, derived_message_id(OutboxKind::Region, 42, added));
/// assert_ne!(id, derived_message_id(OutboxKind::Control, 42, added));
/// assert_eq!(id.get_version_num(), 8);
/// ```
pub fn derived_message_id(kind: OutboxKind, id: i64, date_added: DateTime<Utc>) -> Uuid {
    let millis = u64::try_from(date_added.timestamp_millis()).unwrap_or(0);
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    bytes[6] = match kind {
        OutboxKind::Region => 1,
        OutboxKind::Control => 2,
    };
    bytes[8..].copy_from_slice(&id.to_be_bytes());
    Uuid::new_v8(bytes)
}
