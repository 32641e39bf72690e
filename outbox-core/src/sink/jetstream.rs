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
//! # let server = outbox_core::testing::nats::NatsServer::start()?;
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
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::{stream, Context};
use chrono::SecondsFormat;
use futures::StreamExt;
use tracing::Instrument;
use uuid::Uuid;

use crate::message::Message;
use crate::receiver::{permanent, BatchFuture, BatchItem, HandlerError, HandlerFuture};
use crate::registry::Category;
use crate::shard::{OutboxKind, ShardKey};
use crate::trace::TraceParent;

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
}

impl fmt::Debug for JetStreamSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JetStreamSink")
            .field("prefix", &self.prefix)
            .field("max_in_flight", &self.max_in_flight)
            .field("ack_timeout", &self.ack_timeout)
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
    /// # let server = outbox_core::testing::nats::NatsServer::start().unwrap();
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
        let subject = self.subject(message)?;
        let payload = match &message.payload {
            Some(payload) => payload.to_string().into_bytes(),
            None => Vec::new(),
        };
        let headers = headers(message);
        let sent = self
            .context
            .publish_with_headers(subject.clone(), headers, payload.into())
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

    /// Publishes a batch of messages, each from a different shard, with up
    /// to [`max_in_flight`](Self::with_max_in_flight) publishes awaiting their
    /// acknowledgement at once, and answers one result per message, in the
    /// batch's order (see [`batch_receiver`](Self::batch_receiver)).
    ///
    /// The batch's acknowledgements come to one inbox subscribed for the
    /// batch (each publish replies to `{inbox}.{index}`), not to a request
    /// and a timer per message: that is most of what a pipelined publish
    /// costs the client. A message without an acknowledgement after
    /// [`ack_timeout`](Self::with_ack_timeout) without any arriving fails
    /// with [`JetStreamError::Timeout`].
    pub async fn publish_batch<C: Category>(
        &self,
        batch: Vec<BatchItem<C>>,
    ) -> Vec<Result<PublishAck, JetStreamError>> {
        let count = batch.len();
        let mut results: Vec<Option<Result<PublishAck, JetStreamError>>> =
            (0..count).map(|_| None).collect();
        let mut subjects = vec![String::new(); count];
        let mut spans: Vec<Option<tracing::Span>> = vec![None; count];
        let client = self.context.client();
        let inbox = client.new_inbox();
        let mut acknowledgements = match client.subscribe(format!("{inbox}.*")).await {
            Ok(subscriber) => subscriber,
            Err(error) => {
                let error: async_nats::Error = Box::new(error);
                let text = error.to_string();
                return batch
                    .iter()
                    .map(|item| {
                        Err(JetStreamError::from_publish(
                            "",
                            item.message.message_id,
                            PublishError::with_source(PublishErrorKind::Other, text.clone()),
                        ))
                    })
                    .collect();
            }
        };
        let (mut next, mut outstanding) = (0, 0);
        let mut deadline = tokio::time::Instant::now() + self.ack_timeout;
        loop {
            while next < count && outstanding < self.max_in_flight {
                let item = &batch[next];
                let span = publish_span(item);
                let reply = format!("{inbox}.{next}");
                match self
                    .send_with_reply(&client, &item.message, reply)
                    .instrument(span.clone())
                    .await
                {
                    Ok(subject) => {
                        subjects[next] = subject;
                        spans[next] = Some(span);
                        outstanding += 1;
                    }
                    Err(error) => {
                        span.in_scope(|| tracing::debug!(%error, "publish failed"));
                        results[next] = Some(Err(error));
                    }
                }
                next += 1;
            }
            if outstanding == 0 {
                break;
            }
            let reply = match tokio::time::timeout_at(deadline, acknowledgements.next()).await {
                Ok(Some(reply)) => reply,
                // The connection's client is gone, or nothing came in time.
                Ok(None) | Err(_) => break,
            };
            let Some(index) = reply
                .subject
                .rsplit('.')
                .next()
                .and_then(|token| token.parse::<usize>().ok())
                .filter(|&index| index < count && spans[index].is_some())
            else {
                continue;
            };
            let span = spans[index].take().unwrap_or_else(tracing::Span::none);
            let subject = std::mem::take(&mut subjects[index]);
            let result = span.in_scope(|| {
                let result = self.acknowledged_by(subject, &batch[index].message, &reply);
                if let Err(error) = &result {
                    tracing::debug!(%error, "publish failed");
                }
                result
            });
            results[index] = Some(result);
            outstanding -= 1;
            deadline = tokio::time::Instant::now() + self.ack_timeout;
        }
        results
            .into_iter()
            .zip(subjects)
            .zip(&batch)
            .map(|((result, subject), item)| {
                result.unwrap_or_else(|| {
                    Err(JetStreamError::Timeout {
                        subject,
                        message_id: item.message.message_id,
                    })
                })
            })
            .collect()
    }

    /// Publishes `message` with `reply` as the subject of its
    /// acknowledgement: the message's subject.
    async fn send_with_reply<C: Category>(
        &self,
        client: &async_nats::Client,
        message: &Message<C>,
        reply: String,
    ) -> Result<String, JetStreamError> {
        let subject = self.subject(message)?;
        tracing::Span::current().record("messaging.destination.name", subject.as_str());
        let payload = match &message.payload {
            Some(payload) => payload.to_string().into_bytes(),
            None => Vec::new(),
        };
        let sent = client
            .publish_with_reply_and_headers(
                subject.clone(),
                reply,
                headers(message),
                payload.into(),
            )
            .await;
        match sent {
            Ok(()) => Ok(subject),
            Err(error) => {
                let kind = match error.kind() {
                    async_nats::client::PublishErrorKind::MaxPayloadExceeded => {
                        PublishErrorKind::MaxPayloadExceeded
                    }
                    _ => PublishErrorKind::Other,
                };
                Err(JetStreamError::from_publish(
                    &subject,
                    message.message_id,
                    PublishError::with_source(kind, error),
                ))
            }
        }
    }

    /// What JetStream's `reply` to a publish of `message` says, read as the
    /// client's own acknowledgement future reads it.
    fn acknowledged_by<C: Category>(
        &self,
        subject: String,
        message: &Message<C>,
        reply: &async_nats::Message,
    ) -> Result<PublishAck, JetStreamError> {
        let message_id = message.message_id;
        let failed =
            |source: PublishError| JetStreamError::from_publish(&subject, message_id, source);
        if reply.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
            return Err(failed(PublishError::new(PublishErrorKind::StreamNotFound)));
        }
        let response: async_nats::jetstream::response::Response<PublishAck> =
            serde_json::from_slice(reply.payload.as_ref()).map_err(|error| {
                failed(PublishError::with_source(PublishErrorKind::Other, error))
            })?;
        let acknowledgement = match response {
            async_nats::jetstream::response::Response::Ok(acknowledgement) => acknowledgement,
            async_nats::jetstream::response::Response::Err { error } => {
                return Err(failed(PublishError::with_source(
                    PublishErrorKind::Other,
                    error,
                )));
            }
        };
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

/// A failed publish as the drain takes it: permanent when
/// [`JetStreamError::is_permanent`].
fn to_handler_error(error: JetStreamError) -> HandlerError {
    if error.is_permanent() {
        permanent(error)
    } else {
        HandlerError::from(error)
    }
}

/// The span of one publish of a batch, a child of the message's delivery
/// span.
fn publish_span<C: Category>(item: &BatchItem<C>) -> tracing::Span {
    tracing::info_span!(
        parent: &item.span,
        "outbox.jetstream.publish",
        otel.kind = "producer",
        messaging.system = "nats",
        messaging.operation.type = "send",
        messaging.destination.name = tracing::field::Empty,
        messaging.message.id = %item.message.message_id,
    )
}

/// The shard and fencing token a message was published with
/// ([`SHARD_HEADER`], [`FENCE_HEADER`]), for a consumer that drops a
/// message published late by a worker that lost its claim: keep the
/// highest token applied per shard and skip a lower one (in memory with
/// [`FenceBook::apply_token`](crate::fence::FenceBook::apply_token), in a
/// database with `outbox_seaorm::inbox::Inbox::fence`). `None` when either
/// header is missing (published by a sink older than the tokens) or does
/// not parse.
///
/// ```
/// use outbox_core::fence::{FenceBook, Fenced};
/// use outbox_core::sink::jetstream::{async_nats::HeaderMap, fence_of, FENCE_HEADER, SHARD_HEADER};
///
/// let book = FenceBook::new("orders-consumer");
/// let mut late = HeaderMap::new();
/// late.insert(SHARD_HEADER, "region:0/42");
/// late.insert(FENCE_HEADER, "7");
/// let mut newer = late.clone();
/// newer.insert(FENCE_HEADER, "9");
/// for headers in [&newer, &late] {
///     let (shard, fence) = fence_of(headers).unwrap();
///     let applied = book.apply_token(&shard, fence, || { /* apply the message */ });
///     println!("{fence}: {}", if applied.is_superseded() { "dropped" } else { "applied" });
/// }
/// assert_eq!(book.highest(&"region:0/42".parse().unwrap()).unwrap().get(), 9);
/// ```
pub fn fence_of(headers: &HeaderMap) -> Option<(ShardKey, crate::FencingToken)> {
    let shard = headers.get(SHARD_HEADER)?.as_str().parse().ok()?;
    let fence = headers.get(FENCE_HEADER)?.as_str().parse().ok()?;
    Some((shard, fence))
}

/// The header names, parsed once (a name given as `&str` is validated
/// and copied on every insert).
mod names {
    use async_nats::HeaderName;

    pub(super) const MESSAGE_ID: HeaderName = HeaderName::from_static(super::MESSAGE_ID_HEADER);
    pub(super) const CATEGORY: HeaderName = HeaderName::from_static(super::CATEGORY_HEADER);
    pub(super) const OBJECT: HeaderName = HeaderName::from_static(super::OBJECT_HEADER);
    pub(super) const SHARD: HeaderName = HeaderName::from_static(super::SHARD_HEADER);
    pub(super) const ROW_ID: HeaderName = HeaderName::from_static(super::ROW_ID_HEADER);
    pub(super) const FENCE: HeaderName = HeaderName::from_static(super::FENCE_HEADER);
    pub(super) const COALESCED: HeaderName = HeaderName::from_static(super::COALESCED_HEADER);
    pub(super) const DATE_ADDED: HeaderName = HeaderName::from_static(super::DATE_ADDED_HEADER);
    pub(super) const TRACEPARENT: HeaderName = HeaderName::from_static(super::TRACEPARENT_HEADER);
}

/// The headers of `message` (see the module documentation).
fn headers<C: Category>(message: &Message<C>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(names::MESSAGE_ID, message.message_id.to_string());
    headers.insert(names::CATEGORY, message.category.name());
    headers.insert(names::OBJECT, message.object_identifier.to_string());
    // Region names with a line break never get here: the subject refused them.
    headers.insert(names::SHARD, message.shard.to_string());
    headers.insert(names::ROW_ID, message.id.to_string());
    headers.insert(names::FENCE, message.fence.to_string());
    headers.insert(names::COALESCED, message.coalesced.to_string());
    headers.insert(
        names::DATE_ADDED,
        message
            .date_added
            .to_rfc3339_opts(SecondsFormat::Micros, true),
    );
    if let Some(traceparent) = TraceParent::current().or(message.traceparent) {
        headers.insert(names::TRACEPARENT, traceparent.to_string());
    }
    headers
}

/// Which part of a subject is not a valid token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubjectPart {
    /// The sink's prefix ([`JetStreamSink::with_prefix`]).
    Prefix,
    /// The category's name.
    Category,
    /// The region name of a control-outbox shard.
    Region,
}

impl fmt::Display for SubjectPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SubjectPart::Prefix => "subject prefix",
            SubjectPart::Category => "category name",
            SubjectPart::Region => "region name",
        })
    }
}

/// A value that cannot be (part of) a NATS subject: a token is empty, or
/// holds `.` (within one token), `*`, `>`, whitespace or a control
/// character.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {part} {value:?} cannot be used in a NATS subject: {reason}; subject tokens must be \
     non-empty, without `.`, `*`, `>`, whitespace or control characters{fix}",
    fix = fix_for(.part)
)]
#[non_exhaustive]
pub struct InvalidSubject {
    /// The part of the subject.
    pub part: SubjectPart,
    /// The value that was refused.
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// What to do about an [`InvalidSubject`], by part.
fn fix_for(part: &SubjectPart) -> &'static str {
    match part {
        SubjectPart::Prefix => " (a prefix may join several tokens with `.`)",
        SubjectPart::Category => "",
        SubjectPart::Region => {
            ": rename the region, or publish this category with a receiver of your own (the \
             message is not retried: it is quarantined, or dead-lettered where its scope allows)"
        }
    }
}

/// Why `token` cannot be one subject token, if it cannot.
fn check_token(part: SubjectPart, token: &str) -> Result<(), &'static str> {
    if token.is_empty() {
        return Err(match part {
            SubjectPart::Prefix => "it is empty or has an empty token",
            _ => "it is empty",
        });
    }
    for c in token.chars() {
        match c {
            '.' => return Err("it contains `.`, the token separator"),
            '*' | '>' => return Err("it contains a wildcard (`*` or `>`)"),
            c if c.is_whitespace() => return Err("it contains whitespace"),
            c if c.is_control() => return Err("it contains a control character"),
            _ => {}
        }
    }
    Ok(())
}

/// A message the sink could not publish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JetStreamError {
    /// The message's subject cannot be built. Permanent.
    #[error(transparent)]
    InvalidSubject(#[from] InvalidSubject),
    /// No stream stores the subject: NATS answered "no responders" to the
    /// publish. Transient: the stream may be created later.
    #[error(
        "no JetStream stream stores subject `{subject}` (NATS answered \"no responders\" to \
         message {message_id}): create a stream whose subjects include it \
         (`JetStreamSink::stream_config` makes one for every subject of the sink), and check \
         that the server runs with JetStream enabled; the shard backs off and retries"
    )]
    NoStream {
        /// The subject.
        subject: String,
        /// The message id.
        message_id: Uuid,
    },
    /// JetStream did not acknowledge the publish in time (the context's
    /// timeout). Transient: the message may have been stored or not; the
    /// retry carries the same `Nats-Msg-Id`.
    #[error(
        "JetStream did not acknowledge message {message_id} on `{subject}` in time; it may have \
         been stored or not: the shard backs off and retries, and the stream's duplicate window \
         drops a second copy (is the server up, and JetStream not overloaded?)"
    )]
    Timeout {
        /// The subject.
        subject: String,
        /// The message id.
        message_id: Uuid,
    },
    /// The message is larger than the server's `max_payload` or the
    /// stream's `max_message_size`. Permanent: it will not shrink.
    #[error(
        "message {message_id} on `{subject}` is too large for NATS: {source}; raise the server's \
         `max_payload` or the stream's `max_message_size`, or make the payload smaller, then \
         release the message (it is quarantined, or dead-lettered where its scope allows)"
    )]
    TooLarge {
        /// The subject.
        subject: String,
        /// The message id.
        message_id: Uuid,
        /// What the client or the server said.
        source: PublishError,
    },
    /// Any other failure: the connection is lost, the stream refused the
    /// message (full, with `discard: new`), JetStream answered an error.
    /// Transient.
    #[error(
        "publishing message {message_id} to JetStream on `{subject}` failed: {source}; the shard \
         backs off and retries"
    )]
    Publish {
        /// The subject.
        subject: String,
        /// The message id.
        message_id: Uuid,
        /// The client's error.
        source: PublishError,
    },
}

impl JetStreamError {
    /// Whether retrying cannot help: [`InvalidSubject`](Self::InvalidSubject)
    /// and [`TooLarge`](Self::TooLarge). [`JetStreamSink::receiver`]
    /// returns those as [`permanent`] errors.
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::InvalidSubject(_) | Self::TooLarge { .. })
    }

    fn from_publish(subject: &str, message_id: Uuid, source: PublishError) -> Self {
        let subject = subject.to_owned();
        match source.kind() {
            PublishErrorKind::StreamNotFound => Self::NoStream {
                subject,
                message_id,
            },
            PublishErrorKind::TimedOut => Self::Timeout {
                subject,
                message_id,
            },
            PublishErrorKind::MaxPayloadExceeded => Self::TooLarge {
                subject,
                message_id,
                source,
            },
            _ if exceeds_stream_maximum(&source) => Self::TooLarge {
                subject,
                message_id,
                source,
            },
            _ => Self::Publish {
                subject,
                message_id,
                source,
            },
        }
    }
}

/// Whether JetStream refused the message for the stream's
/// `max_message_size`.
fn exceeds_stream_maximum(error: &PublishError) -> bool {
    std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<async_nats::jetstream::Error>())
        .is_some_and(|error| {
            error.error_code() == async_nats::jetstream::ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::registry! {
        ShopScope = 0 {
            PriceChanged = 1,
        }
    }

    fn message(traceparent: Option<TraceParent>) -> Message<OutboxCategory> {
        let added = chrono::DateTime::parse_from_rfc3339("2026-11-24T09:00:00.123456Z")
            .map(|t| t.to_utc())
            .unwrap_or_default();
        Message {
            id: 12,
            message_id: Uuid::nil(),
            first_id: 10,
            coalesced: 3,
            shard: ShardKey::control("us", OutboxScope::ShopScope, 42),
            fence: crate::FencingToken::new(9),
            category: OutboxCategory::PriceChanged,
            object_identifier: 7,
            payload: None,
            date_added: added,
            scheduled_for: added,
            scheduled_from: added,
            synchronous: false,
            traceparent,
        }
    }

    fn text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
        headers.get(name).map(|value| value.as_str())
    }

    #[test]
    fn headers_describe_the_message() {
        let headers = headers(&message(None));
        assert_eq!(
            text(&headers, MESSAGE_ID_HEADER),
            Some("00000000-0000-0000-0000-000000000000")
        );
        assert_eq!(text(&headers, CATEGORY_HEADER), Some("PriceChanged"));
        assert_eq!(text(&headers, OBJECT_HEADER), Some("7"));
        assert_eq!(text(&headers, SHARD_HEADER), Some("control[us]:0/42"));
        assert_eq!(text(&headers, ROW_ID_HEADER), Some("12"));
        assert_eq!(text(&headers, FENCE_HEADER), Some("9"));
        assert_eq!(
            fence_of(&headers),
            Some((
                ShardKey::control("us", OutboxScope::ShopScope, 42),
                crate::FencingToken::new(9)
            ))
        );
        let mut without = headers.clone();
        without.insert(FENCE_HEADER, "not a token");
        assert_eq!(fence_of(&without), None);
        assert_eq!(text(&headers, COALESCED_HEADER), Some("3"));
        assert_eq!(
            text(&headers, DATE_ADDED_HEADER),
            Some("2026-11-24T09:00:00.123456Z")
        );
    }

    #[test]
    fn without_a_span_the_traceparent_is_the_rows_or_none() {
        // No subscriber in unit tests: no current span context.
        assert_eq!(text(&headers(&message(None)), TRACEPARENT_HEADER), None);
        let stored: TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            .parse()
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(
            text(&headers(&message(Some(stored))), TRACEPARENT_HEADER),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
    }

    #[test]
    fn tokens_without_separators_wildcards_or_whitespace_are_valid() {
        for token in ["us", "eu-west", "region_1", "-1", "Ünïcode"] {
            assert_eq!(check_token(SubjectPart::Region, token), Ok(()), "{token}");
        }
        for token in [
            "", "eu.west", "*", "a>", "eu west", "eu\twest", "eu\nwest", "\u{7f}",
        ] {
            assert!(
                check_token(SubjectPart::Region, token).is_err(),
                "{token:?}"
            );
        }
    }

    #[test]
    fn the_error_for_a_region_says_what_happens_to_the_message() {
        let error = InvalidSubject {
            part: SubjectPart::Region,
            value: "eu.west".to_owned(),
            reason: "it contains `.`, the token separator",
        };
        let text = error.to_string();
        assert!(text.contains("region name \"eu.west\""), "{text}");
        assert!(text.contains("quarantined"), "{text}");
    }
}
