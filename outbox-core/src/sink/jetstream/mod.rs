//! Delivers outbox messages to NATS JetStream (feature `nats`).
//!
//! [`JetStreamSink`] is a receiver: register it for the categories to
//! publish, and the drain publishes each of their messages to a JetStream
//! subject, awaits JetStream's acknowledgement (the message is stored), and
//! only then deletes the outbox rows.
//!
//! ```
//! outbox_core::registry! {
//!     ShopScope = 0 (shard_field = "shop_id") {
//!         PriceChanged = 1 (no_coalesce),
//!     }
//! }
//! use outbox_core::sink::jetstream::{async_nats, JetStreamSink, MESSAGE_ID_HEADER};
//! use outbox_core::{Drainer, MemoryStore, OutboxKind, Receivers, ShardKey};
//! use futures::StreamExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let server = outbox_testing::nats::NatsServer::start()?;
//! # let url = server.url();
//! let jetstream = async_nats::jetstream::new(async_nats::connect(url).await?);
//! let sink = JetStreamSink::new(jetstream.clone()); // subjects `outbox.…`
//! // A stream over every subject of the sink: file storage, a 10-minute
//! // duplicate window (or create one with your own tooling).
//! jetstream.get_or_create_stream(sink.stream_config("OUTBOX")).await?;
//!
//! // Batches: the next message of many shards at once, published pipelined.
//! let receivers = Receivers::new().on_batch(OutboxCategory::PriceChanged, sink.batch_receiver());
//! receivers.ensure_complete()?;
//!
//! // (An in-memory outbox here; `OutboxWorker` drains the database.)
//! let store = MemoryStore::new();
//! let shop = ShardKey::region(OutboxScope::ShopScope, 42);
//! store.write(&shop, OutboxCategory::PriceChanged, 7, Some(serde_json::json!({ "cents": 990 })));
//! Drainer::new(store.clone(), receivers).drain_due(OutboxKind::Region).await?;
//! assert!(store.rows(OutboxKind::Region).is_empty()); // stored, then deleted
//!
//! // What a consumer reads: one subject per shard, the message id as `Nats-Msg-Id`.
//! let stream = jetstream.get_stream("OUTBOX").await?;
//! let mut messages = stream
//!     .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig::default())
//!     .await?
//!     .messages()
//!     .await?;
//! let message = messages.next().await.ok_or("no message")??;
//! assert_eq!(message.subject.as_str(), "outbox.PriceChanged.region.42");
//! assert_eq!(message.payload.as_ref(), br#"{"cents":990}"#);
//! assert!(message.headers.as_ref().and_then(|h| h.get(MESSAGE_ID_HEADER)).is_some());
//! # Ok(()) }
//! ```
//!
//! # Subjects and order
//!
//! **One subject per shard**: `{prefix}.{category}.region.{shard}` for the
//! region outbox and `{prefix}.{category}.control.{region}.{shard}` for the
//! control outbox, where `{category}` is the category's name and `{shard}`
//! the shard identifier (the scope is the category's): e.g.
//! `outbox.PriceChanged.region.42`. The prefix (default [`DEFAULT_PREFIX`])
//! may have several tokens (`acme.outbox`).
//!
//! What keeps a shard's order is the drain, not the subject: it delivers a
//! shard one message at a time and waits for the receiver, and the sink
//! answers only once JetStream has acknowledged the publish. So a message is
//! published only after every earlier message of its shard is stored, and a
//! shard's messages are in the stream in shard order, whatever subjects they
//! go to.
//!
//! # Pipelined publishes and order
//!
//! A publish that waits for its acknowledgement before the next one is
//! slow: a round trip per message, and a wake-up of a task for each. The
//! sink pipelines *across shards*, never within one.
//! [`batch_receiver`](JetStreamSink::batch_receiver) (registered with
//! [`Receivers::on_batch`](crate::Receivers::on_batch)) gets from the drain
//! a *wave*: the next message of every shard of the round that has one, at
//! most one per shard. It hands all of them to the client at once (up to
//! [`with_max_in_flight`](JetStreamSink::with_max_in_flight), 1,000 by
//! default), awaits every acknowledgement, and answers one result per
//! message; the drain records them and only then builds the next wave. So
//! the stream never holds a later message of a shard before an earlier one:
//!
//! - messages of one batch are of different shards, with no order between
//!   them to keep, so whatever JetStream stores of a batch, and in whatever
//!   order, is in order per shard;
//! - a shard's next message is published only after its previous one was
//!   acknowledged as stored (a failed one ends the shard's run: it backs
//!   off, or is quarantined, and nothing later of it is published until
//!   that message is stored).
//!
//! Pipelining *within* a shard ("publish 1, 2, 3, then await the three
//! acknowledgements") is what this rules out: when 2 fails (refused by the
//! stream: too large, a limit reached; or lost with a connection while 3,
//! buffered by the client, goes out on the next one), 3 is stored ahead of
//! it, and the retry of 2 lands after 3; the duplicate window then drops
//! the retried 3, and the stream keeps 1, 3, 2 for good. Only an atomic
//! batch (JetStream 2.12, `allow_atomic`) could make "2 and everything
//! after it" fail together; Debian's server is 2.9. The test
//! `a_publish_refused_in_the_middle_of_a_shard_holds_it_and_keeps_its_order`
//! refuses a shard's third message while its fourth would be stored, and
//! checks that the fourth waits.
//!
//! [`receiver`](JetStreamSink::receiver) (with [`Receivers::on`](crate::Receivers::on))
//! publishes one message per call, awaiting its acknowledgement: the drain's
//! `concurrency` shard tasks are then the only publishes in flight. The
//! batch receiver is the faster choice wherever the drain has more shards
//! than that: `cargo bench -p outbox-axum --bench jetstream` measures both.
//!
//! The subject per shard is for the consumers. A consumer that filters on
//! one shard (`outbox.PriceChanged.region.42`), or on a set of them with
//! wildcards or a server-side subject mapping that partitions on the shard
//! token, gets those shards in order while other consumers take the other
//! shards in parallel; with one subject per category, every consumer that
//! keeps order would have to read the whole category. JetStream's
//! per-subject limits (`max_messages_per_subject`) and the last message per
//! subject also apply per shard. The cost is one subject per shard in the
//! stream's subject index, which grows with the number of distinct shards
//! the stream holds messages of.
//!
//! A region name that cannot be a subject token (empty, or with `.`, `*`,
//! `>`, whitespace or control characters) fails the message with
//! [`InvalidSubject`], a permanent error (see below).
//!
//! # Acknowledgements, errors and duplicates
//!
//! The sink awaits the publish acknowledgement (the `PubAck`) inside the
//! receiver, so the drain deletes the rows only after JetStream stored the
//! message. An acknowledgement that says `duplicate` (the stream had
//! already stored that `Nats-Msg-Id`) is a success: the message is there.
//! It is counted in [`SINK_DUPLICATES`](crate::metrics::SINK_DUPLICATES).
//!
//! | failure | error | what the drain does |
//! |---|---|---|
//! | no stream stores the subject (NATS answers "no responders"), JetStream off | [`JetStreamError::NoStream`] | transient: backoff, retry |
//! | no acknowledgement within the context's timeout (5 s by default) | [`JetStreamError::Timeout`] | transient |
//! | connection lost, stream full, any other JetStream error | [`JetStreamError::Publish`] | transient |
//! | message larger than the server's `max_payload` or the stream's `max_message_size` | [`JetStreamError::TooLarge`] | permanent |
//! | a region name that cannot be a subject token | [`JetStreamError::InvalidSubject`] | permanent |
//! | a stored payload that is not JSON (written by hand on SQLite) | [`JetStreamError::PayloadNotJson`] | permanent, nothing published |
//!
//! A missing stream is transient, not permanent: it is what a deploy that
//! starts the workers before the stream is created looks like, and a
//! permanent error would quarantine every shard that has a message, each to
//! be released by hand. As a transient error it holds the shards with
//! backoff, and the drain's outage handling probes one of them about once a
//! second: the first publish that succeeds after the stream appears makes
//! the others due at once. The error message says which subject had no
//! stream. Errors that no retry can fix are permanent
//! ([`permanent`]): the message is quarantined, or
//! dead-lettered where its scope allows, until an operator releases it.
//!
//! # The duplicate window
//!
//! A message is published again when the process that published it dies
//! between JetStream's acknowledgement and the outbox delete (the rows stay
//! claimed until the claim's lease, 3 s by default, runs out, and the next
//! worker to take the shard publishes them again), and when an
//! acknowledgement is lost (a timeout or a dropped connection after the
//! server stored the message: the shard backs off, 1 s doubling by default,
//! and retries). Both copies carry the same `Nats-Msg-Id`, and JetStream
//! drops the second when it comes within the stream's **duplicate window**
//! of the first. So make the window longer than the longest time between a
//! publish and its repeat: the lease, plus the time until a worker runs
//! again after a crash (a restart, a deploy), plus the shard's backoff at
//! the time. [`JetStreamSink::stream_config`] sets
//! [`DEFAULT_DUPLICATE_WINDOW`], 10 minutes (JetStream's own default is 2);
//! the server keeps the message ids of the window in memory.
//!
//! A message published again after the window (its shard held longer than
//! that by an outage or a quarantine) is stored twice, with the same
//! `Nats-Msg-Id`: consumers that must not apply a message twice record that
//! id where they apply it, e.g. with `outbox_seaorm::inbox::Inbox` keyed by
//! the header's UUID.
//!
//! # Headers and body
//!
//! | header | value |
//! |---|---|
//! | `Nats-Msg-Id` ([`MESSAGE_ID_HEADER`]) | the message id, a UUID v7 (hyphenated, lowercase) |
//! | `Outbox-Category` ([`CATEGORY_HEADER`]) | the category's name |
//! | `Outbox-Object` ([`OBJECT_HEADER`]) | the object identifier |
//! | `Outbox-Shard` ([`SHARD_HEADER`]) | the shard: `region:0/42`, or `control[us]:0/42` (kind, region, scope value, identifier) |
//! | `Outbox-Row-Id` ([`ROW_ID_HEADER`]) | the delivered row's id (in its outbox table) |
//! | `Outbox-Fence` ([`FENCE_HEADER`]) | the claim's fencing token (see [`crate::fence`]): a consumer that keeps the highest one it applied per shard drops a message with a lower one, published late by a worker that lost its claim |
//! | `Outbox-Coalesced` ([`COALESCED_HEADER`]) | how many rows the message stands for (1 without coalescing) |
//! | `Outbox-Date-Added` ([`DATE_ADDED_HEADER`]) | when the oldest of them was written, RFC 3339 in UTC |
//! | `traceparent` ([`TRACEPARENT_HEADER`]) | W3C trace context, when there is one (see below) |
//!
//! The body is the payload's JSON text; a message without a payload has an
//! empty body (a payload of JSON `null` is `null`).
//!
//! # CloudEvents
//!
//! With [`JetStreamSink::with_cloudevents`] each message is also a
//! CloudEvent, as the NATS protocol binding of CloudEvents maps one (see
//! [`crate::sink::cloudevents`] for the attributes). In binary mode (the
//! default) the body stays the payload and the attributes are added as
//! headers: `ce-specversion`, `ce-id` (the message id, as `Nats-Msg-Id`),
//! `ce-source`, `ce-type`, `ce-subject` (the object), `ce-time` (when the
//! message, for a coalesced group its oldest row, was written) and, with a
//! payload, `ce-datacontenttype: application/json`. In structured mode the
//! body is the event's JSON (the payload as its `data`) with
//! `Content-Type: application/cloudevents+json`. The headers of the table
//! above are sent either way.
//!
//! `traceparent` is the context of the publish span (`outbox.jetstream.publish`,
//! a child of the delivery span, which continues the trace of the span that
//! wrote the row) when a `tracing-opentelemetry` layer is installed, so a
//! consumer that continues it joins the writer's trace; without one, the
//! `traceparent` the row stored, if any.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_nats::header::HeaderMap;
use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::{stream, Context};

use crate::message::Message;
use crate::receiver::{permanent, BatchFuture, BatchItem, HandlerError, HandlerFuture};
use crate::registry::Category;
use crate::shard::{OutboxKind, ShardKey};
use crate::sink::cloudevents::CloudEvents;

mod batch;
mod error;
mod headers;

pub use error::{InvalidSubject, JetStreamError, SubjectPart};
pub use headers::fence_of;

use error::check_token;
use headers::{cloudevent, headers};

/// The `async-nats` crate the sink is built on: use it to connect and to
/// create streams, so that the versions match.
pub use async_nats;

/// The subject prefix of [`JetStreamSink::new`]: `outbox`.
pub const DEFAULT_PREFIX: &str = "outbox";

/// The duplicate window of [`JetStreamSink::stream_config`]: 10 minutes.
/// See [the module documentation](self#the-duplicate-window).
pub const DEFAULT_DUPLICATE_WINDOW: Duration = Duration::from_secs(600);

/// Publishes of a batch awaiting their acknowledgement at once, by default
/// ([`JetStreamSink::with_max_in_flight`]): 1,000.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1_000;

/// How long a batch waits without any acknowledgement, by default
/// ([`JetStreamSink::with_ack_timeout`]): 5 s.
pub const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// Header: the message id, by which JetStream drops duplicates
/// (`Nats-Msg-Id`).
pub const MESSAGE_ID_HEADER: &str = "Nats-Msg-Id";
/// Header: the category's name.
pub const CATEGORY_HEADER: &str = "Outbox-Category";
/// Header: the object identifier.
pub const OBJECT_HEADER: &str = "Outbox-Object";
/// Header: the shard, as [`ShardKey`]'s `Display` writes it (`region:0/42`,
/// `control[us]:0/42`).
pub const SHARD_HEADER: &str = "Outbox-Shard";
/// Header: the id of the delivered outbox row.
pub const ROW_ID_HEADER: &str = "Outbox-Row-Id";
/// Header: the fencing token of the claim that published the message (see
/// [`crate::fence`]): it grows per shard, so a consumer that keeps the
/// highest one it applied per shard drops a message with a lower one.
pub const FENCE_HEADER: &str = "Outbox-Fence";
/// Header: how many outbox rows the message stands for.
pub const COALESCED_HEADER: &str = "Outbox-Coalesced";
/// Header: when the oldest of those rows was written (RFC 3339, UTC).
pub const DATE_ADDED_HEADER: &str = "Outbox-Date-Added";
/// Header: the W3C trace context (`traceparent`).
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// A receiver that publishes messages to NATS JetStream, one subject per
/// shard, and returns once JetStream has stored them. See the [module
/// documentation](self) for the subjects, the order, the errors and the
/// duplicate window.
///
/// Clones share the connection.
#[derive(Clone)]
pub struct JetStreamSink {
    context: Context,
    prefix: Arc<str>,
    max_in_flight: usize,
    ack_timeout: Duration,
    cloudevents: Option<CloudEvents>,
}

impl fmt::Debug for JetStreamSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JetStreamSink")
            .field("prefix", &self.prefix)
            .field("max_in_flight", &self.max_in_flight)
            .field("ack_timeout", &self.ack_timeout)
            .field("cloudevents", &self.cloudevents)
            .finish_non_exhaustive()
    }
}

impl JetStreamSink {
    /// A sink publishing through `context` under the subject prefix
    /// [`DEFAULT_PREFIX`] (`outbox`). The context's timeout (5 s unless
    /// set with `ContextBuilder::timeout`) bounds the wait for each
    /// acknowledgement; keep it below the drain's delivery timeout (10 s).
    pub fn new(context: Context) -> Self {
        Self {
            context,
            prefix: Arc::from(DEFAULT_PREFIX),
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            ack_timeout: DEFAULT_ACK_TIMEOUT,
            cloudevents: None,
        }
    }

    /// The same sink under another subject prefix: one or more tokens
    /// separated by `.` (`acme.outbox`).
    ///
    /// # Errors
    ///
    /// [`InvalidSubject`] when a token is empty or holds `*`, `>`,
    /// whitespace or a control character.
    pub fn with_prefix(self, prefix: impl Into<String>) -> Result<Self, InvalidSubject> {
        let prefix = prefix.into();
        for token in prefix.split('.') {
            check_token(SubjectPart::Prefix, token).map_err(|reason| InvalidSubject {
                part: SubjectPart::Prefix,
                value: prefix.clone(),
                reason,
            })?;
        }
        Ok(Self {
            prefix: Arc::from(prefix),
            ..self
        })
    }

    /// The subject prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The JetStream context the sink publishes through.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// The wildcard that covers every subject of the sink: `{prefix}.>`.
    pub fn wildcard(&self) -> String {
        format!("{}.>", self.prefix)
    }

    /// A stream configuration that stores every subject of the sink: named
    /// `name`, subjects [`wildcard`](Self::wildcard), file storage, and a
    /// duplicate window of [`DEFAULT_DUPLICATE_WINDOW`]. Set retention
    /// limits (`max_age`, `max_bytes`) to taste before creating it.
    pub fn stream_config(&self, name: impl Into<String>) -> stream::Config {
        stream::Config {
            name: name.into(),
            subjects: vec![self.wildcard()],
            storage: stream::StorageType::File,
            duplicate_window: DEFAULT_DUPLICATE_WINDOW,
            ..Default::default()
        }
    }

    /// The subject of messages of `category` in `shard`:
    /// `{prefix}.{category}.region.{identifier}`, or
    /// `{prefix}.{category}.control.{region}.{identifier}`.
    ///
    /// ```
    /// # outbox_core::registry! { ShopScope = 0 { PriceChanged = 1 } }
    /// use outbox_core::sink::jetstream::{async_nats, JetStreamSink, SubjectPart};
    /// use outbox_core::ShardKey;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let server = outbox_testing::nats::NatsServer::start().unwrap();
    /// # let url = server.url();
    /// let client = async_nats::connect(url).await.unwrap();
    /// let sink = JetStreamSink::new(async_nats::jetstream::new(client));
    /// let shop = ShardKey::region(OutboxScope::ShopScope, 42);
    /// assert_eq!(
    ///     sink.subject_for(OutboxCategory::PriceChanged, &shop).unwrap(),
    ///     "outbox.PriceChanged.region.42"
    /// );
    /// let eu = ShardKey::control("eu", OutboxScope::ShopScope, -1);
    /// assert_eq!(
    ///     sink.subject_for(OutboxCategory::PriceChanged, &eu).unwrap(),
    ///     "outbox.PriceChanged.control.eu.-1"
    /// );
    /// let dotted = ShardKey::control("eu.west", OutboxScope::ShopScope, 7);
    /// let error = sink.subject_for(OutboxCategory::PriceChanged, &dotted).unwrap_err();
    /// assert_eq!(error.part, SubjectPart::Region);
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`InvalidSubject`] when the shard's region name cannot be a subject
    /// token.
    pub fn subject_for<C: Category>(
        &self,
        category: C,
        shard: &ShardKey,
    ) -> Result<String, InvalidSubject> {
        let category = category.name();
        // A registry name is a Rust identifier, always a valid token; checked
        // all the same, so that the subject is valid whatever its source.
        check_token(SubjectPart::Category, category).map_err(|reason| InvalidSubject {
            part: SubjectPart::Category,
            value: category.to_owned(),
            reason,
        })?;
        let identifier = shard.identifier();
        match shard.kind() {
            OutboxKind::Region => Ok(format!("{}.{category}.region.{identifier}", self.prefix)),
            OutboxKind::Control => {
                let region = shard.region_name().unwrap_or_default();
                check_token(SubjectPart::Region, region).map_err(|reason| InvalidSubject {
                    part: SubjectPart::Region,
                    value: region.to_owned(),
                    reason,
                })?;
                Ok(format!(
                    "{}.{category}.control.{region}.{identifier}",
                    self.prefix
                ))
            }
        }
    }

    /// The subject of `message`: see [`subject_for`](Self::subject_for).
    ///
    /// # Errors
    ///
    /// As [`subject_for`](Self::subject_for).
    pub fn subject<C: Category>(&self, message: &Message<C>) -> Result<String, InvalidSubject> {
        self.subject_for(message.category, &message.shard)
    }

    /// Publishes `message` to its subject with the sink's headers and
    /// waits for JetStream's acknowledgement: `Ok` means the stream stored
    /// it, now or before (`ack.duplicate`).
    ///
    /// For receivers that publish and do more, or publish only some
    /// messages; [`receiver`](Self::receiver) is this call as a receiver.
    ///
    /// # Errors
    ///
    /// [`JetStreamError`]; [`JetStreamError::is_permanent`] says whether a
    /// retry can help.
    #[tracing::instrument(
        name = "outbox.jetstream.publish",
        skip_all,
        fields(
            otel.kind = "producer",
            messaging.system = "nats",
            messaging.operation.type = "send",
            messaging.destination.name = tracing::field::Empty,
            messaging.message.id = %message.message_id,
        ),
        // DEBUG: the drain logs a failed delivery itself, at WARN.
        err(level = "debug")
    )]
    pub async fn publish<C: Category>(
        &self,
        message: &Message<C>,
    ) -> Result<PublishAck, JetStreamError> {
        let (subject, acknowledgement) = self.send(message).await?;
        tracing::Span::current().record("messaging.destination.name", subject.as_str());
        self.acknowledged(subject, message, acknowledgement).await
    }

    /// Hands `message` to the client to publish: its subject and the
    /// acknowledgement to await.
    async fn send<C: Category>(
        &self,
        message: &Message<C>,
    ) -> Result<(String, PublishAckFuture), JetStreamError> {
        let Outgoing {
            subject,
            headers,
            body,
        } = self.outgoing(message)?;
        let sent = self
            .context
            .publish_with_headers(subject.clone(), headers, body.into())
            .await;
        match sent {
            Ok(acknowledgement) => Ok((subject, acknowledgement)),
            Err(source) => Err(JetStreamError::from_publish(
                &subject,
                message.message_id,
                source,
            )),
        }
    }

    /// What is published for `message`: its subject, headers and body (the
    /// payload's JSON text, empty without a payload; or the structured
    /// CloudEvent).
    fn outgoing<C: Category>(&self, message: &Message<C>) -> Result<Outgoing, JetStreamError> {
        let subject = self.subject(message)?;
        let mut headers = headers(message);
        let mut body = body(message)?;
        if let Some(cloudevents) = &self.cloudevents {
            if let Some(structured) = cloudevent(cloudevents, message, &mut headers) {
                body = structured;
            }
        }
        Ok(Outgoing {
            subject,
            headers,
            body,
        })
    }

    /// Awaits the acknowledgement of a message [`send`](Self::send) handed
    /// out.
    async fn acknowledged<C: Category>(
        &self,
        subject: String,
        message: &Message<C>,
        acknowledgement: PublishAckFuture,
    ) -> Result<PublishAck, JetStreamError> {
        let message_id = message.message_id;
        let acknowledgement = acknowledgement
            .await
            .map_err(|source| JetStreamError::from_publish(&subject, message_id, source))?;
        if acknowledgement.duplicate {
            self.duplicate(&subject, message, &acknowledgement);
        }
        Ok(acknowledgement)
    }

    /// Logs and counts an acknowledgement that says the stream had the
    /// message already.
    fn duplicate<C: Category>(
        &self,
        subject: &str,
        message: &Message<C>,
        acknowledgement: &PublishAck,
    ) {
        tracing::debug!(
            subject,
            message_id = %message.message_id,
            sequence = acknowledgement.sequence,
            "JetStream already had this message id: a redelivery, dropped by the stream"
        );
        metrics::counter!(
            crate::metrics::SINK_DUPLICATES,
            "sink" => "jetstream",
            "category" => message.category.name(),
            "kind" => message.kind().as_str(),
        )
        .increment(1);
    }

    /// The sink as a receiver, for [`Receivers::on`](crate::Receivers::on):
    /// it [`publish`](Self::publish)es each message and fails the delivery
    /// when the publish fails, as a permanent error when
    /// [`JetStreamError::is_permanent`]. One publish at a time per shard
    /// delivery task: [`batch_receiver`](Self::batch_receiver) is faster.
    pub fn receiver<C: Category>(
        &self,
    ) -> impl Fn(Message<C>) -> HandlerFuture + Clone + Send + Sync + 'static {
        let sink = self.clone();
        move |message: Message<C>| {
            let sink = sink.clone();
            Box::pin(async move {
                sink.publish(&message)
                    .await
                    .map(drop)
                    .map_err(to_handler_error)
            })
        }
    }

    /// The sink as a batch receiver, for
    /// [`Receivers::on_batch`](crate::Receivers::on_batch): the drain hands it
    /// the next message of many shards at once, and it publishes them
    /// without waiting for each acknowledgement (up to
    /// [`with_max_in_flight`](Self::with_max_in_flight) at once), then
    /// answers when every acknowledgement is in. See [the module
    /// documentation](self#pipelined-publishes-and-order) for why this keeps
    /// each shard's order when a publish fails.
    pub fn batch_receiver<C: Category>(
        &self,
    ) -> impl Fn(Vec<BatchItem<C>>) -> BatchFuture + Clone + Send + Sync + 'static {
        let sink = self.clone();
        move |batch: Vec<BatchItem<C>>| {
            let sink = sink.clone();
            Box::pin(async move {
                sink.publish_batch(batch)
                    .await
                    .into_iter()
                    .map(|result| result.map(drop).map_err(to_handler_error))
                    .collect()
            })
        }
    }

    /// The same sink publishing each message as a CloudEvent (see
    /// [`crate::sink::cloudevents`] and [the module
    /// documentation](self#cloudevents)): in binary mode (the default) the
    /// body is the payload and the attributes are `ce-*` headers; in
    /// [structured](CloudEvents::structured) mode the body is the event's
    /// JSON, with `Content-Type: application/cloudevents+json`. Every other
    /// header is published as without it. Default: none.
    pub fn with_cloudevents(mut self, cloudevents: CloudEvents) -> Self {
        self.cloudevents = Some(cloudevents);
        self
    }

    /// The CloudEvents the sink publishes, if it does
    /// ([`with_cloudevents`](Self::with_cloudevents)).
    pub fn cloudevents(&self) -> Option<&CloudEvents> {
        self.cloudevents.as_ref()
    }

    /// How many publishes of a batch await their acknowledgement at once
    /// (at least 1). Default: [`DEFAULT_MAX_IN_FLIGHT`].
    pub fn with_max_in_flight(mut self, publishes: usize) -> Self {
        self.max_in_flight = publishes.max(1);
        self
    }

    /// How long the [batch receiver](Self::batch_receiver) waits without any
    /// acknowledgement arriving before the batch's unacknowledged messages
    /// fail with [`JetStreamError::Timeout`] (transient: retried, and the
    /// duplicate window drops a second copy). The single-message
    /// [`receiver`](Self::receiver) uses the context's timeout instead. Keep
    /// it below the drain's delivery timeout (10 s). Default:
    /// [`DEFAULT_ACK_TIMEOUT`], JetStream's own default.
    pub fn with_ack_timeout(mut self, timeout: Duration) -> Self {
        self.ack_timeout = timeout;
        self
    }
}

/// The body published for `message`: the payload's JSON text, empty without
/// a payload; a stored text that is not JSON is refused.
fn body<C: Category>(message: &Message<C>) -> Result<Vec<u8>, JetStreamError> {
    match &message.payload {
        Some(payload) if payload.is_json() => Ok(payload.as_bytes().to_vec()),
        Some(_) => Err(JetStreamError::PayloadNotJson {
            message_id: message.message_id,
        }),
        None => Ok(Vec::new()),
    }
}

/// A message ready to publish.
struct Outgoing {
    subject: String,
    headers: HeaderMap,
    body: Vec<u8>,
}

/// A failed publish as the drain takes it: permanent when
/// [`JetStreamError::is_permanent`].
fn to_handler_error(error: JetStreamError) -> HandlerError {
    if error.is_permanent() {
        permanent(error)
    } else {
        HandlerError::from(error)
    }
}
