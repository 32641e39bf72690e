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
use std::time::Duration;

use crate::message::{Message, PayloadError};
use crate::registry::contract::{
    known_versions, written_version, Contract, Decoder, TypedCategory, UnknownVersion,
};
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

/// An error after which the receiver asked to be left alone for a while:
/// a peer's `429 Too Many Requests` or `503` with `Retry-After`. Made with
/// [`retry_after`].
///
/// It is transient like any other error, and the shard backs off as usual,
/// but for at least [`after`](Self::after) (capped at the drain's
/// `BackoffPolicy::max`): the delay is the larger of the asked one and
/// the shard's next backoff.
#[derive(Debug)]
pub struct RetryAfter {
    /// How long the receiver asked the sender to wait.
    pub after: Duration,
    /// What failed.
    pub error: HandlerError,
}

impl fmt::Display for RetryAfter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (retry after {:?})", self.error, self.after)
    }
}

impl std::error::Error for RetryAfter {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.error.as_ref())
    }
}

/// Marks `error` as transient with a delay the receiver asked for: the
/// shard waits at least `after` (up to the backoff cap) before it is tried
/// again.
///
/// ```
/// # outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 } }
/// use std::time::Duration;
/// use outbox_core::{retry_after, HandlerError, Message, Receivers};
///
/// let receivers = Receivers::new().on(OutboxCategory::OrgUpdate, |_msg: Message<OutboxCategory>| async move {
///     // The peer said `429 Too Many Requests` with `Retry-After: 30`.
///     Err::<(), HandlerError>(retry_after("rate limited", Duration::from_secs(30)))
/// });
/// ```
pub fn retry_after(error: impl Into<HandlerError>, after: Duration) -> HandlerError {
    Box::new(RetryAfter {
        after,
        error: error.into(),
    })
}

/// The delay asked for with [`retry_after`] (anywhere in `error`'s chain of
/// sources; the first one found), if any.
pub fn requested_retry_after(error: &(dyn std::error::Error + 'static)) -> Option<Duration> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(asked) = error.downcast_ref::<RetryAfter>() {
            return Some(asked.after);
        }
        next = error.source();
    }
    None
}

/// The future a registered handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send + 'static>>;

/// The future a batch handler returns: one result per message of the
/// batch, in the batch's order.
pub type BatchFuture =
    Pin<Box<dyn Future<Output = Vec<Result<(), HandlerError>>> + Send + 'static>>;

/// One message of a batch (see [`Receivers::on_batch`]), with the span of
/// its delivery: the drain opens one per message as for a single delivery
/// (continuing the trace of the span that wrote the row), and a batch
/// handler that traces its work per message makes its spans children of
/// it (`tracing::Instrument::instrument(future, item.span.clone())`, or
/// `info_span!(parent: &item.span, ...)`).
#[derive(Debug)]
#[non_exhaustive]
pub struct BatchItem<C> {
    /// The message, as a single delivery would get it.
    pub message: Message<C>,
    /// The span of its delivery.
    pub span: tracing::Span,
}

impl<C> BatchItem<C> {
    /// An item of `message` delivered under `span`: for tests of a batch
    /// handler.
    pub fn new(message: Message<C>, span: tracing::Span) -> Self {
        Self { message, span }
    }
}

type One<C> = Arc<dyn Fn(Message<C>) -> HandlerFuture + Send + Sync + 'static>;
type Many<C> = Arc<dyn Fn(Vec<BatchItem<C>>) -> BatchFuture + Send + Sync + 'static>;

/// A registered handler: called with one message, or with a batch of them.
pub(crate) enum Handler<C> {
    One(One<C>),
    Batch(Many<C>),
}

impl<C> Clone for Handler<C> {
    fn clone(&self) -> Self {
        match self {
            Handler::One(handler) => Handler::One(handler.clone()),
            Handler::Batch(handler) => Handler::Batch(handler.clone()),
        }
    }
}

/// The map from category to handler that a drain delivers through.
pub struct Receivers<C> {
    handlers: HashMap<C, Handler<C>>,
    /// The payload versions each typed receiver accepts, ascending.
    versions: HashMap<C, Arc<[u32]>>,
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
            versions: HashMap::new(),
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
        let handler: One<C> = Arc::new(move |message| {
            let future = handler(message);
            Box::pin(async move { future.await.map_err(Into::into) })
        });
        self.insert(category, Handler::One(handler), None);
        self
    }

    /// Registers `handler` for `category` as [`on`](Self::on) does, for a
    /// handler that decodes typed payloads itself and accepts the payload
    /// `versions` ([`accepted_versions`](Self::accepted_versions) reports
    /// them): what a replicated model of a typed category registers
    /// (`outbox_seaorm`'s `ReplicationReceivers::replicate`). The handler
    /// parks its shard for another version by returning
    /// [`UnknownVersion`]. Nothing checks `versions` against the registry:
    /// give the versions the handler's decoding really accepts, for a
    /// typed category.
    pub fn on_accepting<F, Fut, E>(
        mut self,
        category: C,
        versions: impl IntoIterator<Item = u32>,
        handler: F,
    ) -> Self
    where
        F: Fn(Message<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<HandlerError> + 'static,
    {
        let mut versions: Vec<u32> = versions.into_iter().collect();
        versions.sort_unstable();
        versions.dedup();
        let handler: One<C> = Arc::new(move |message| {
            let future = handler(message);
            Box::pin(async move { future.await.map_err(Into::into) })
        });
        self.insert(category, Handler::One(handler), Some(versions.into()));
        self
    }

    fn insert(&mut self, category: C, handler: Handler<C>, versions: Option<Arc<[u32]>>) {
        if self.handlers.insert(category, handler).is_some() {
            self.duplicates.push(category);
        }
        match versions {
            Some(versions) => self.versions.insert(category, versions),
            None => self.versions.remove(&category),
        };
    }

    /// Registers `handler` for the typed category `category` (declared
    /// `(payload = T)` in the registry): it is called with the message and
    /// its payload decoded into `T`, the registry's type, so that a
    /// handler of another type does not compile.
    ///
    /// It accepts the payload versions `T` knows (its
    /// [`VERSION`](crate::Contract::VERSION) and those of
    /// [`older`](crate::Contract::older), upcast to `T`); a message of
    /// any other version parks its shard until a binary that knows it
    /// drains it ([`UnknownVersion`]). A payload
    /// of a known version that does not decode fails the delivery with
    /// [`PayloadError::Malformed`]
    /// (transient: the shard backs off), a missing one with
    /// [`PayloadError::Missing`].
    ///
    /// ```
    /// use outbox_core::{Contract, HandlerError, Message, Receivers};
    ///
    /// #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    /// pub struct Rename { pub name: String }
    /// impl Contract for Rename { const VERSION: u32 = 1; }
    ///
    /// outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 (payload = Rename) } }
    ///
    /// let receivers = Receivers::new().on_typed(
    ///     outbox_categories::OrgUpdate,
    ///     |message: Message<OutboxCategory>, rename: Rename| async move {
    ///         println!("org {} is now {}", message.object_identifier, rename.name);
    ///         Ok::<_, HandlerError>(())
    ///     },
    /// );
    /// assert!(receivers.ensure_complete().is_ok());
    /// ```
    pub fn on_typed<K, F, Fut, E>(mut self, category: K, handler: F) -> Self
    where
        K: TypedCategory<Category = C>,
        F: Fn(Message<C>, K::Payload) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<HandlerError> + 'static,
    {
        let _ = category;
        let decoder = Arc::new(Decoder::<K::Payload>::new());
        let versions = decoder.versions().clone();
        let handler: One<C> =
            Arc::new(
                move |message: Message<C>| match decode_message(&decoder, &message) {
                    Ok(payload) => {
                        let future = handler(message, payload);
                        Box::pin(async move { future.await.map_err(Into::into) })
                    }
                    Err(error) => Box::pin(async move { Err(error) }),
                },
            );
        self.insert(K::CATEGORY, Handler::One(handler), Some(versions));
        self
    }

    /// Registers `handler` for `category` as a *batch* handler: the drain
    /// calls it with many messages at once, each from a different shard,
    /// and it answers one result per message, in the batch's order. Made for
    /// receivers that are cheaper per message when they send many at once
    /// without waiting for each answer: a broker's pipelined publishes
    /// (`JetStreamSink::batch_receiver`), a bulk insert, a batched HTTP
    /// call.
    ///
    /// What a batch handler may rely on:
    ///
    /// - **At most one message per shard in a batch, and none of a shard
    ///   while its previous message's result is not back.** A shard's
    ///   messages are still delivered one after the other, in order (rule
    ///   3), so the handler may send a batch's messages in any order or all
    ///   at once: there is no order between different shards to keep.
    /// - A failed message fails only its own shard: that shard backs off (or
    ///   dead-letters, or is quarantined, as for a single delivery) and
    ///   nothing later of it is delivered meanwhile; the batch's other
    ///   shards go on.
    /// - The drain delivers the shards of a round in *waves*: each wave
    ///   takes the next message of every shard of the round that has one
    ///   (the batch) and waits for the whole wave, up to the delivery
    ///   timeout, which applies to the batch as a whole. A synchronous
    ///   flush delivers its few shards the same way.
    ///
    /// A result missing from the answer (fewer results than messages)
    /// fails its message as a transient error; a panic or a timeout fails
    /// every message of the batch. [`current_delivery`](crate::message::current_delivery)
    /// is `None` inside a batch handler: each [`BatchItem`] carries its
    /// message and its delivery span instead.
    ///
    /// ```
    /// # outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 } }
    /// use outbox_core::{BatchItem, HandlerError, Receivers};
    ///
    /// let receivers = Receivers::new().on_batch(OutboxCategory::OrgUpdate, |batch: Vec<BatchItem<OutboxCategory>>| async move {
    ///     // e.g. one multi-row INSERT for the whole batch
    ///     batch.iter().map(|_item| Ok::<(), HandlerError>(())).collect::<Vec<_>>()
    /// });
    /// assert!(receivers.ensure_complete().is_ok());
    /// ```
    pub fn on_batch<F, Fut, E>(mut self, category: C, handler: F) -> Self
    where
        F: Fn(Vec<BatchItem<C>>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<Result<(), E>>> + Send + 'static,
        E: Into<HandlerError> + 'static,
    {
        let handler: Many<C> = Arc::new(move |batch| {
            let future = handler(batch);
            Box::pin(async move {
                future
                    .await
                    .into_iter()
                    .map(|result| result.map_err(Into::into))
                    .collect()
            })
        });
        self.insert(category, Handler::Batch(handler), None);
        self
    }

    /// Acknowledges `category` without doing anything: its rows are deleted as
    /// delivered. Meant for retired categories whose rows may still be queued.
    pub fn discard(self, category: C) -> Self {
        self.on(category, |_message| async { Ok::<(), HandlerError>(()) })
    }

    /// Merges the handlers of `other` into `self`.
    pub fn merge(mut self, mut other: Receivers<C>) -> Self {
        for (category, handler) in other.handlers {
            let versions = other.versions.remove(&category);
            self.insert(category, handler, versions);
        }
        self.duplicates.extend(other.duplicates);
        self
    }

    /// The payload versions the receiver of `category` accepts, ascending,
    /// when it was registered typed ([`on_typed`](Self::on_typed),
    /// [`on_accepting`](Self::on_accepting)); `None`
    /// for an untyped receiver, which accepts any.
    pub fn accepted_versions(&self, category: C) -> Option<&[u32]> {
        self.versions.get(&category).map(|versions| &versions[..])
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

    /// Whether any category has a batch handler.
    pub(crate) fn has_batch(&self) -> bool {
        self.handlers
            .values()
            .any(|handler| matches!(handler, Handler::Batch(_)))
    }

    /// Whether the stored category `raw` has a batch handler.
    pub(crate) fn is_batch(&self, raw: i32) -> bool {
        C::try_from(raw)
            .ok()
            .and_then(|category| self.handlers.get(&category))
            .is_some_and(|handler| matches!(handler, Handler::Batch(_)))
    }
}

/// A category's payload as code generic over typed and untyped categories
/// writes and reads it (the replicated models): `serde_json::Value` for an
/// untyped category (no version recorded, read as it is), or a
/// [`Contract`] (its version recorded; read at the row's version,
/// upcast, or [`UnknownVersion`] for a version it does not know).
pub trait CategoryPayload: Sized + Send + 'static {
    /// The version a row records: `None` for untyped JSON, the contract's
    /// [`VERSION`](Contract::VERSION) for a typed payload.
    fn version() -> Option<u32>;

    /// The versions a receiver of this payload accepts, ascending: `None`
    /// for untyped JSON (any).
    fn accepted_versions() -> Option<Vec<u32>>;

    /// The JSON stored for this payload.
    ///
    /// # Errors
    ///
    /// When it does not serialize to JSON.
    fn to_json(&self) -> Result<serde_json::Value, serde_json::Error>;

    /// Reads a message's payload (`None` when it has none; a typed row
    /// without a payload still parks for a version the contract does not
    /// know).
    ///
    /// # Errors
    ///
    /// [`PayloadError::Malformed`] for a
    /// payload that does not decode, [`UnknownVersion`] (which parks the
    /// shard) for a version a contract does not know.
    fn from_message<C: Category>(message: &Message<C>) -> Result<Option<Self>, HandlerError>;
}

impl CategoryPayload for serde_json::Value {
    fn version() -> Option<u32> {
        None
    }

    fn accepted_versions() -> Option<Vec<u32>> {
        None
    }

    fn to_json(&self) -> Result<serde_json::Value, serde_json::Error> {
        Ok(self.clone())
    }

    fn from_message<C: Category>(message: &Message<C>) -> Result<Option<Self>, HandlerError> {
        match message.payload {
            None => Ok(None),
            Some(_) => message.payload_as().map(Some).map_err(Into::into),
        }
    }
}

impl<T: Contract> CategoryPayload for T {
    fn version() -> Option<u32> {
        Some(T::VERSION)
    }

    fn accepted_versions() -> Option<Vec<u32>> {
        Some(known_versions::<T>())
    }

    fn to_json(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::to_value(self)
    }

    fn from_message<C: Category>(message: &Message<C>) -> Result<Option<Self>, HandlerError> {
        let decoder = Decoder::<T>::new();
        // A row without a payload still records its writer's version: one
        // this binary does not know parks the shard, as a payload would.
        known_version(&decoder, message)?;
        match message.payload {
            None => Ok(None),
            Some(_) => decode_message(&decoder, message).map(Some),
        }
    }
}

/// Decodes a typed receiver's payload from the version its row records:
/// [`UnknownVersion`] (which parks the shard) for a version `T` does not
/// know, a [`PayloadError`](crate::PayloadError) for a payload missing or
/// not of its version's type.
pub(crate) fn decode_message<C: Category, T: Contract>(
    decoder: &Decoder<T>,
    message: &Message<C>,
) -> Result<T, HandlerError> {
    let category = message.category.name();
    let version = known_version(decoder, message)?;
    let Some(payload) = message.payload.as_ref() else {
        return Err(Box::new(PayloadError::Missing {
            category,
            id: message.id,
        }));
    };
    match decoder.decode(version, payload) {
        Some(Ok(value)) => Ok(value),
        Some(Err(source)) => Err(Box::new(PayloadError::Malformed {
            category,
            id: message.id,
            expected: decoder
                .type_of(version)
                .unwrap_or(std::any::type_name::<T>()),
            source,
        })),
        None => Err(Box::new(UnknownVersion {
            category,
            version,
            known: decoder.versions().to_vec(),
        })),
    }
}

/// The version a message's row records (none is 1), if `decoder` knows it;
/// [`UnknownVersion`] otherwise, before anything looks at the payload.
fn known_version<C: Category, T: Contract>(
    decoder: &Decoder<T>,
    message: &Message<C>,
) -> Result<u32, HandlerError> {
    let version = written_version(message.payload_version);
    if decoder.versions().contains(&version) {
        Ok(version)
    } else {
        Err(Box::new(UnknownVersion {
            category: message.category.name(),
            version,
            known: decoder.versions().to_vec(),
        }))
    }
}

/// Some live categories have no receiver, or one was registered twice.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
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

crate::error_debug::debug_with_message!(IncompleteReceivers);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::Payload;
    use crate::{FencingToken, ShardKey};

    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema, Debug, PartialEq)]
    pub struct Price {
        pub cents: i64,
    }

    impl Contract for Price {
        const VERSION: u32 = 2;
    }

    crate::registry! {
        ShopScope = 0 {
            PriceChanged = 1 (payload = Price),
        }
    }

    fn message(payload: Option<&str>, version: Option<u32>) -> Message<OutboxCategory> {
        let at = chrono::DateTime::<chrono::Utc>::UNIX_EPOCH;
        Message {
            id: 1,
            message_id: uuid::Uuid::nil(),
            first_id: 1,
            coalesced: 1,
            shard: ShardKey::region(OutboxScope::ShopScope, 7),
            fence: FencingToken::new(1),
            category: OutboxCategory::PriceChanged,
            object_identifier: 7,
            payload: payload.map(|text| Payload::from_stored(text.to_owned())),
            date_added: at,
            scheduled_for: at,
            scheduled_from: at,
            synchronous: false,
            traceparent: None,
            payload_version: version,
        }
    }

    fn unknown(error: &HandlerError) -> Option<u32> {
        error
            .downcast_ref::<UnknownVersion>()
            .map(|unknown| unknown.version)
    }

    #[test]
    fn the_version_is_checked_before_the_payload() {
        let decoder = Decoder::<Price>::new();
        // A version it does not know parks, with or without a payload.
        for payload in [Some(r#"{"cents": 5}"#), None] {
            let error = decode_message(&decoder, &message(payload, Some(3))).unwrap_err();
            assert_eq!(unknown(&error), Some(3), "{error}");
            let error = Price::from_message(&message(payload, Some(3))).unwrap_err();
            assert_eq!(unknown(&error), Some(3), "{error}");
        }
        // A known version without a payload: missing for a typed receiver,
        // nothing for a tombstone.
        let error = decode_message(&decoder, &message(None, Some(2))).unwrap_err();
        assert!(error.downcast_ref::<PayloadError>().is_some(), "{error}");
        assert_eq!(
            Price::from_message(&message(None, Some(2))).ok(),
            Some(None)
        );
        assert_eq!(
            Price::from_message(&message(Some(r#"{"cents": 5}"#), Some(2))).ok(),
            Some(Some(Price { cents: 5 }))
        );
        // No version is version 1, which this contract does not read.
        let error = Price::from_message(&message(None, None)).unwrap_err();
        assert_eq!(unknown(&error), Some(1), "{error}");
        let receivers = Receivers::new().on_typed(
            outbox_categories::PriceChanged,
            |_: Message<OutboxCategory>, _: Price| async { Ok::<_, HandlerError>(()) },
        );
        assert_eq!(
            receivers.accepted_versions(OutboxCategory::PriceChanged),
            Some(&[2][..])
        );
    }
}
