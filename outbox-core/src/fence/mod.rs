//! Fencing tokens: what lets a receiver refuse a delivery from a worker that
//! lost its claim (rule 12).
//!
//! A claim's lease gives one worker a shard at a time (rule 3), and the
//! store refuses the commit of a worker whose lease ended (rule 7). Neither
//! reaches the receiver: a worker paused past its lease (a stopped process,
//! a frozen VM, a starved host, a stalled network call) resumes and calls
//! its receiver with what it read, after another worker delivered newer
//! changes of the same shard. Every claim therefore gets a
//! [`FencingToken`] that only grows, and every [`Message`]
//! carries the token of the claim that read it. A receiver that keeps the
//! highest token it applied per shard and refuses a lower one as
//! superseded (`outbox_seaorm::inbox::Inbox::apply_fenced`, or the same
//! comparison in its own store) can never put an old state back.
//!
//! What a token means:
//!
//! - every message of one claim of a shard carries the same token, and a
//!   later claim of the shard (by any worker, in any process) a higher one:
//!   the stores draw it from a counter in the database (PostgreSQL: the
//!   sequence `outbox_fence`, read by the claim's own statement; SQLite: the
//!   one-row table `outbox_fence`, in the claim's transaction);
//! - it keeps growing across a database crash: the claim tables of
//!   PostgreSQL are unlogged and start empty after one, and the first
//!   claim of each bucket then moves the sequence a million values forward,
//!   past anything a claim acknowledged before the crash may have seen (a
//!   sequence may hand out again a few dozen values it did not write to
//!   disk);
//! - tokens of different shards are not comparable in any useful way, and
//!   equal tokens of one shard come from one claim, in id order.
//!
//! What it does not do: the worker still calls the receiver, and only the
//! receiver can refuse. A receiver outside the library (a webhook endpoint,
//! a stream consumer) must compare tokens itself: per (sender, shard), keep
//! the highest token applied, in the same transaction as the change, and
//! refuse (acknowledge without applying) a delivery with a lower one. The
//! engine also gives up on its own where it can: a worker whose lease ended
//! by its own clock calls no receiver.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

pub use crate::fence_token::FencingToken;

use crate::message::Message;
use crate::registry::Category;
use crate::shard::ShardKey;

/// What a fenced receiver did with a delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fenced<T> {
    /// Applied: its token was the highest seen for its shard (or equal: the
    /// same claim); the change's value.
    Applied(T),
    /// Refused: a higher token of the shard was applied before, so the
    /// delivery comes from a worker that lost its claim and newer changes
    /// were delivered since. Acknowledge it (return `Ok`): the stale
    /// worker's rows are fenced at its commit anyway, and retrying would
    /// only be refused again.
    Superseded {
        /// The highest token applied for the shard.
        highest: FencingToken,
    },
}

impl<T> Fenced<T> {
    /// Whether the delivery was refused.
    pub fn is_superseded(&self) -> bool {
        matches!(self, Self::Superseded { .. })
    }
}

/// Records a refused delivery: the `outbox.superseded` counter (by category
/// and consumer) and a log line. Called by the fenced receivers of the
/// library; call it from a receiver of your own that compares tokens.
pub fn record_superseded(
    consumer: &str,
    category: &str,
    shard: &dyn fmt::Display,
    token: FencingToken,
    highest: FencingToken,
) {
    metrics::counter!(
        crate::metrics::SUPERSEDED,
        "category" => category.to_owned(),
        "consumer" => consumer.to_owned()
    )
    .increment(1);
    tracing::info!(
        consumer,
        category,
        shard = %shard,
        fence = token.get(),
        highest = highest.get(),
        "outbox delivery superseded: a newer claim of its shard was applied; refused"
    );
}

/// The highest fencing token applied per shard, kept in this process: for
/// a receiver whose state lives in memory (a cache, a local index, a test
/// replica). A receiver that writes to a database keeps its tokens there,
/// in the transaction of the change (`outbox_seaorm::inbox::Inbox::apply_fenced`).
///
/// Cheap to clone; clones share the book.
///
/// ```
/// use outbox_core::fence::{FenceBook, Fenced};
/// use outbox_core::{FencingToken, ShardKey};
/// # outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 } }
///
/// let book = FenceBook::new("cache");
/// let shard = ShardKey::region(OutboxScope::OrgScope, 7);
/// assert_eq!(book.apply_token(&shard, FencingToken::new(5), || "new"), Fenced::Applied("new"));
/// // A worker paused past its lease comes back with an older claim's token:
/// assert!(book.apply_token(&shard, FencingToken::new(3), || "old").is_superseded());
/// ```
#[derive(Clone, Debug)]
pub struct FenceBook {
    consumer: Arc<str>,
    highest: Arc<Mutex<HashMap<ShardKey, FencingToken>>>,
}

impl FenceBook {
    /// An empty book for `consumer` (the name its refusals are counted by).
    pub fn new(consumer: impl Into<Arc<str>>) -> Self {
        Self {
            consumer: consumer.into(),
            highest: Arc::default(),
        }
    }

    /// Runs `apply` unless a higher token of the message's shard was
    /// applied; the check, `apply` and the record are one step (under the
    /// book's lock: keep `apply` short and never `.await` in it). A refusal
    /// is counted as `outbox.superseded`.
    pub fn apply<C: Category, T>(
        &self,
        message: &Message<C>,
        apply: impl FnOnce() -> T,
    ) -> Fenced<T> {
        let fenced = self.apply_token(&message.shard, message.fence, apply);
        if let Fenced::Superseded { highest } = fenced {
            record_superseded(
                &self.consumer,
                message.category.name(),
                &message.shard,
                message.fence,
                highest,
            );
        }
        fenced
    }

    /// [`apply`](Self::apply) for a token and shard read elsewhere (a
    /// header); counts nothing.
    pub fn apply_token<T>(
        &self,
        shard: &ShardKey,
        token: FencingToken,
        apply: impl FnOnce() -> T,
    ) -> Fenced<T> {
        let mut highest = self.highest.lock().unwrap_or_else(|p| p.into_inner());
        match highest.get(shard) {
            Some(&seen) if seen > token => Fenced::Superseded { highest: seen },
            _ => {
                let value = apply();
                highest.insert(shard.clone(), token);
                Fenced::Applied(value)
            }
        }
    }

    /// The highest token applied for `shard`, if any.
    pub fn highest(&self, shard: &ShardKey) -> Option<FencingToken> {
        self.highest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(shard)
            .copied()
    }
}
