//! Receivers: the async handler that each category's messages are delivered to.
//!
//! ```
//! # outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1, OrgOld = 2 (retired) } }
//! use outbox_core::{Message, Receivers};
//!
//! #[derive(serde::Deserialize)]
//! struct Rename { name: String }
//!
//! let receivers = Receivers::new().on(OutboxCategory::OrgUpdate, |msg: Message<OutboxCategory>| async move {
//!     let rename: Rename = msg.payload_as()?;
//!     println!("org {} is now {}", msg.object_identifier, rename.name);
//!     Ok::<_, outbox_core::HandlerError>(())
//! });
//! // The retired category needs no receiver.
//! assert!(receivers.ensure_complete().is_ok());
//! ```
//!
//! Handlers must be idempotent: a message can be delivered more than once (a
//! crash after the handler and before the delete), and only the newest payload
//! of an object survives coalescing.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::message::Message;
use crate::registry::Category;

/// The error a handler returns. Any error type converts into it with `?`.
///
/// An error is *transient* unless wrapped with [`permanent`]: the shard backs
/// off and is tried again.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error that retrying cannot fix (the receiver rejected the message
/// itself: a 4xx from a peer, a payload it cannot accept). Made with
/// [`permanent`].
///
/// The drain does not retry it: where the shard's scope dead-letters
/// (`DeadLetterPolicy`), the message's group is dead-lettered at once and the
/// shard goes on; otherwise the shard is *quarantined*: nothing of it is
/// delivered until an operator releases it (`StoreAdmin::retry_now`), and
/// it is logged at `ERROR`, counted in `outbox.quarantined`, and listed by
/// `StoreAdmin::failing_shards` with `ShardState::is_quarantined`.
#[derive(Debug)]
pub struct Permanent(pub HandlerError);

impl fmt::Display for Permanent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "permanent error: {}", self.0)
    }
}

impl std::error::Error for Permanent {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.0.as_ref())
    }
}

/// Marks `error` as permanent: retrying the message cannot succeed.
///
/// ```
/// # outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 } }
/// use outbox_core::{permanent, HandlerError, Message, Receivers};
///
/// #[derive(serde::Deserialize)]
/// struct Rename { name: String }
///
/// let receivers = Receivers::new().on(OutboxCategory::OrgUpdate, |msg: Message<OutboxCategory>| async move {
///     // A payload this binary cannot read will not get better by waiting.
///     let rename: Rename = msg.payload_as().map_err(permanent)?;
///     println!("org {} is now {}", msg.object_identifier, rename.name);
///     Ok::<_, HandlerError>(())
/// });
/// ```
pub fn permanent(error: impl Into<HandlerError>) -> HandlerError {
    Box::new(Permanent(error.into()))
}

/// Whether `error` was marked with [`permanent`] (anywhere in its chain of
/// sources).
pub fn is_permanent(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if error.is::<Permanent>() {
            return true;
        }
        next = error.source();
    }
    false
}

/// The future a registered handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send + 'static>>;

type Handler<C> = Arc<dyn Fn(Message<C>) -> HandlerFuture + Send + Sync + 'static>;

/// The map from category to handler that a drain delivers through.
pub struct Receivers<C> {
    handlers: HashMap<C, Handler<C>>,
    duplicates: Vec<C>,
}

impl<C: Category> Default for Receivers<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Category> fmt::Debug for Receivers<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut registered: Vec<C> = self.handlers.keys().copied().collect();
        registered.sort();
        f.debug_struct("Receivers")
            .field("registered", &registered)
            .field("duplicates", &self.duplicates)
            .finish()
    }
}

impl<C: Category> Receivers<C> {
    /// No receivers.
    pub fn new() -> Self {
        Self {
            handlers: HashMap::new(),
            duplicates: Vec::new(),
        }
    }

    /// Registers `handler` for `category`.
    ///
    /// Registering a category twice keeps the last handler and is reported by
    /// [`ensure_complete`](Self::ensure_complete).
    pub fn on<F, Fut, E>(mut self, category: C, handler: F) -> Self
    where
        F: Fn(Message<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<HandlerError> + 'static,
    {
        self.register(category, handler);
        self
    }

    /// Registers `handler` for `category` (the `&mut` form of [`on`](Self::on)).
    pub fn register<F, Fut, E>(&mut self, category: C, handler: F) -> &mut Self
    where
        F: Fn(Message<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<HandlerError> + 'static,
    {
        let handler: Handler<C> = Arc::new(move |message| {
            let future = handler(message);
            Box::pin(async move { future.await.map_err(Into::into) })
        });
        if self.handlers.insert(category, handler).is_some() {
            self.duplicates.push(category);
        }
        self
    }

    /// Acknowledges `category` without doing anything: its rows are deleted as
    /// delivered. Meant for retired categories whose rows may still be queued.
    pub fn discard(self, category: C) -> Self {
        self.on(category, |_message| async { Ok::<(), HandlerError>(()) })
    }

    /// Merges the handlers of `other` into `self`.
    pub fn merge(mut self, other: Receivers<C>) -> Self {
        for (category, handler) in other.handlers {
            if self.handlers.insert(category, handler).is_some() {
                self.duplicates.push(category);
            }
        }
        self.duplicates.extend(other.duplicates);
        self
    }

    /// Whether `category` has a handler.
    pub fn contains(&self, category: C) -> bool {
        self.handlers.contains_key(&category)
    }

    /// Live (not retired) categories that have no handler, in declaration order.
    pub fn missing(&self) -> Vec<C> {
        C::ALL
            .iter()
            .copied()
            .filter(|category| !category.is_retired() && !self.handlers.contains_key(category))
            .collect()
    }

    /// Live categories of the given scopes that have no handler: for a worker
    /// that only drains some scopes.
    pub fn missing_in(&self, scopes: &[C::Scope]) -> Vec<C> {
        self.missing()
            .into_iter()
            .filter(|category| scopes.contains(&category.scope()))
            .collect()
    }

    /// Checks that every live category has exactly one handler.
    ///
    /// # Errors
    ///
    /// [`IncompleteReceivers`] naming the categories without a handler and
    /// those registered twice.
    pub fn ensure_complete(&self) -> Result<(), IncompleteReceivers> {
        let missing = self.missing();
        if missing.is_empty() && self.duplicates.is_empty() {
            return Ok(());
        }
        Err(IncompleteReceivers {
            missing: missing.iter().map(|c| c.name()).collect(),
            duplicates: self.duplicates.iter().map(|c| c.name()).collect(),
        })
    }

    pub(crate) fn handler(&self, category: C) -> Option<&Handler<C>> {
        self.handlers.get(&category)
    }
}

/// Some live categories have no receiver, or one was registered twice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "outbox receivers are incomplete: no receiver for [{}]{}; register one with \
     `Receivers::on` (or `discard` for a category you mean to drop) before starting a worker",
    missing.join(", "),
    if duplicates.is_empty() { String::new() } else { format!("; registered twice: [{}]", duplicates.join(", ")) }
)]
pub struct IncompleteReceivers {
    /// Names of live categories with no handler.
    pub missing: Vec<&'static str>,
    /// Names of categories registered more than once.
    pub duplicates: Vec<&'static str>,
}
