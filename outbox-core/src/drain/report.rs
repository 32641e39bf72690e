use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::receiver::HandlerError;
use crate::registry::UnknownCategory;
use crate::shard::ShardKey;
use crate::store::StoreError;

/// Why one delivery failed. The shard stops at the failed message and is
/// rescheduled with backoff; nothing is deleted.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// The receiver returned an error.
    #[error("receiver failed: {0}")]
    Handler(#[source] HandlerError),
    /// The receiver panicked; the panic was caught.
    #[error("receiver panicked: {0}")]
    Panicked(String),
    /// The receiver did not finish within the delivery timeout.
    #[error("receiver did not finish within {0:?}")]
    Timeout(Duration),
    /// The row's category is unknown to this binary.
    #[error(transparent)]
    UnknownCategory(UnknownCategory),
    /// No receiver is registered for the category.
    #[error(
        "no receiver is registered for {category}; register one with `Receivers::on`, \
         or `Receivers::discard` to drop its messages"
    )]
    NoReceiver {
        /// The category name.
        category: &'static str,
    },
    /// The row's shard scope is not the scope its category belongs to.
    #[error(
        "row of {category} is stored under scope {row_scope}, but {category} belongs to \
         scope {expected_scope}; it was not written through the outbox write API"
    )]
    ScopeMismatch {
        /// The category name.
        category: &'static str,
        /// The category's scope value.
        expected_scope: i32,
        /// The row's `shard_scope`.
        row_scope: i32,
    },
}

crate::error_debug::debug_with_message!(DeliveryError {
    Handler,
    Panicked,
    Timeout,
    UnknownCategory,
    NoReceiver,
    ScopeMismatch
});

impl DeliveryError {
    /// The payload version the receiver does not know, when that is what
    /// failed: the shard is parked, not backed off
    /// ([`UnknownVersion`](crate::UnknownVersion)).
    pub fn unknown_version(&self) -> Option<&crate::registry::contract::UnknownVersion> {
        match self {
            DeliveryError::Handler(error) => {
                crate::registry::contract::unknown_version(error.as_ref())
            }
            _ => None,
        }
    }

    /// Whether retrying cannot help: the receiver returned an error marked
    /// with [`permanent`](crate::permanent).
    pub fn is_permanent(&self) -> bool {
        match self {
            DeliveryError::Handler(error) => crate::receiver::is_permanent(error.as_ref()),
            _ => false,
        }
    }

    /// A short tag for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            DeliveryError::Handler(error) if crate::receiver::is_permanent(error.as_ref()) => {
                "permanent"
            }
            DeliveryError::Handler(error)
                if crate::registry::contract::unknown_version(error.as_ref()).is_some() =>
            {
                "unknown_version"
            }
            DeliveryError::Handler(_) => "handler",
            DeliveryError::Panicked(_) => "panic",
            DeliveryError::Timeout(_) => "timeout",
            DeliveryError::UnknownCategory(_) => "unknown_category",
            DeliveryError::NoReceiver { .. } => "no_receiver",
            DeliveryError::ScopeMismatch { .. } => "scope_mismatch",
        }
    }
}

/// A shard that stopped on a failed delivery.
#[derive(Debug)]
pub struct ShardFailure {
    /// The shard.
    pub shard: ShardKey,
    /// The id of the row whose delivery failed (its group's newest).
    pub id: i64,
    /// The stored category value.
    pub category: i32,
    /// The category name, when this binary knows it.
    pub category_name: Option<&'static str>,
    /// The object of the failed message.
    pub object_identifier: i64,
    /// When the shard will be tried again.
    pub retry_at: DateTime<Utc>,
    /// Whether the group was moved to the dead-letter table (its scope's
    /// policy) instead of holding the shard.
    pub dead_lettered: bool,
    /// What failed.
    pub error: DeliveryError,
}

impl ShardFailure {
    /// The category name, or its number when unknown.
    pub fn category_label(&self) -> String {
        match self.category_name {
            Some(name) => name.to_owned(),
            None => format!("category {}", self.category),
        }
    }
}

/// What a drain call did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct DrainReport {
    /// Shards claimed.
    pub shards: usize,
    /// Successful receiver calls (one per coalescing group).
    pub deliveries: usize,
    /// Rows deleted, delivered or culled.
    pub rows_deleted: u64,
    /// Rows culled by an operator's control.
    pub culled: usize,
    /// Rows moved to the dead-letter table.
    pub dead_lettered: u64,
    /// Shards stopped on a failure.
    pub failures: Vec<ShardFailure>,
    /// Shards whose claim expired or was taken before their commit; nothing was
    /// written for them, and their rows are delivered again by the next owner.
    pub lost_claims: Vec<ShardKey>,
    /// Synchronous flushes deferred because their shard's bucket was already
    /// being delivered further up the call stack (a receiver writing
    /// outboxes).
    pub deferred: usize,
    /// Claimed shards left alone because they back off after a failure.
    pub backing_off: usize,
}

impl DrainReport {
    /// Adds `other` into `self`.
    pub fn absorb(&mut self, other: DrainReport) {
        self.shards += other.shards;
        self.deliveries += other.deliveries;
        self.rows_deleted += other.rows_deleted;
        self.culled += other.culled;
        self.dead_lettered += other.dead_lettered;
        self.failures.extend(other.failures);
        self.lost_claims.extend(other.lost_claims);
        self.deferred += other.deferred;
        self.backing_off += other.backing_off;
    }

    /// Whether nothing was claimed, delivered or deferred.
    pub fn is_empty(&self) -> bool {
        self.shards == 0 && self.deferred == 0
    }
}

/// A synchronous flush that did not deliver everything it was asked to. The
/// rows stay committed; the background drain delivers them.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum FlushError {
    /// A delivery failed.
    #[error(
        "outbox flush failed delivering {category} (row {id}, object {object_identifier}) \
         on shard {shard}: {source}; the shard retries at {retry_at}"
    )]
    Delivery {
        /// The shard.
        shard: ShardKey,
        /// The category name, or its number when unknown.
        category: String,
        /// The failed row.
        id: i64,
        /// The failed message's object.
        object_identifier: i64,
        /// When the background drain tries again.
        retry_at: DateTime<Utc>,
        /// What failed.
        #[source]
        source: DeliveryError,
    },
    /// The shard backs off after a failed delivery; nothing was tried
    /// (rule 5: a failing shard waits, whoever asks).
    #[error(
        "outbox shard {shard} backs off after a failed delivery until {retry_at}; its rows \
         are left to the background drain"
    )]
    BackingOff {
        /// The shard.
        shard: ShardKey,
        /// When the background drain tries it again.
        retry_at: DateTime<Utc>,
    },
    /// Another worker held the shard's bucket for longer than the flush may
    /// wait.
    #[error(
        "outbox shard {shard} was held by another worker for {waited:?}; its rows are left \
         to the background drain"
    )]
    ShardBusy {
        /// The shard.
        shard: ShardKey,
        /// How long the flush waited.
        waited: Duration,
    },
    /// An operator paused the shard (or its scope): nothing was tried, and
    /// its rows wait until the pause is lifted (see [`crate::control`]).
    #[error(
        "outbox shard {shard} is paused by an operator; its rows wait until the pause is lifted"
    )]
    Paused {
        /// The shard.
        shard: ShardKey,
    },
    /// The flush's claim expired before it could commit; another worker owns
    /// the shard now and delivers the rows again.
    #[error("outbox flush lost its claim on shard {shard} before committing")]
    ClaimLost {
        /// The shard.
        shard: ShardKey,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

crate::error_debug::debug_with_message!(FlushError {
    Delivery,
    BackingOff,
    ShardBusy,
    Paused,
    ClaimLost,
    Store
});

impl FlushError {
    /// Whether the flush stopped because of an operator's control rather
    /// than a failure (nothing to warn about: the operator asked for it).
    pub fn is_operator_control(&self) -> bool {
        matches!(self, FlushError::Paused { .. })
    }

    /// The shard it is about (none for a store error).
    pub fn shard(&self) -> Option<&ShardKey> {
        match self {
            FlushError::Delivery { shard, .. }
            | FlushError::BackingOff { shard, .. }
            | FlushError::ShardBusy { shard, .. }
            | FlushError::Paused { shard }
            | FlushError::ClaimLost { shard } => Some(shard),
            FlushError::Store(_) => None,
        }
    }

    /// The flush error of a failed delivery of a round's report
    /// ([`DrainReport::failures`]).
    pub fn from_failure(failure: ShardFailure) -> Self {
        FlushError::Delivery {
            category: failure.category_label(),
            shard: failure.shard,
            id: failure.id,
            object_identifier: failure.object_identifier,
            retry_at: failure.retry_at,
            source: failure.error,
        }
    }
}
