//! Delivers messages to NATS JetStream.
//!
//! ```no_run
//! # outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1, OrgWebhook = 2 (no_coalesce) } }
//! use outbox_core::sink::jetstream::JetStreamSink;
//! use outbox_core::Receivers;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = async_nats::connect("127.0.0.1:4222").await?;
//! let jetstream = async_nats::jetstream::new(client);
//! // A stream over the sink's subjects (or create it with your tooling).
//! jetstream
//!     .get_or_create_stream(async_nats::jetstream::stream::Config {
//!         name: "OUTBOX".into(),
//!         subjects: vec!["outbox.>".into()],
//!         duplicate_window: std::time::Duration::from_secs(600),
//!         ..Default::default()
//!     })
//!     .await?;
//! let sink = JetStreamSink::new(jetstream, "outbox")?;
//! let receivers = Receivers::new()
//!     .on(OutboxCategory::OrgUpdate, sink.receiver())
//!     .on(OutboxCategory::OrgWebhook, sink.receiver());
//! # let _ = receivers;
//! # Ok(()) }
//! ```
//!
//! # Subjects and order
//!
//! One subject per shard: `{prefix}.region.{scope}.{shard}` for the region
//! outbox, `{prefix}.control.{region}.{scope}.{shard}` for the control
//! outbox (e.g. `outbox.region.OrgScope.42`). Each message is published
//! only after the previous one of its shard was stored: the drain delivers a
//! shard one message at a time, and the sink returns only once JetStream has
//! acknowledged the publish. So a shard's messages are in the stream in
//! shard order, and a consumer that filters on a shard's subject (or on
//! `{prefix}.region.OrgScope.*`, one ordered consumer per shard group) reads
//! them in that order, while shards go on in parallel. Pipelining publishes
//! (sending the next before the previous is acknowledged) would be faster,
//! but a failed publish in the middle would put its successors first.
//!
//! # No loss, no duplicates
//!
//! The outbox rows are deleted only after the acknowledgement: a publish
//! that fails or times out (JetStream down, no stream for the subject yet)
//! is a transient error, and the shard backs off and tries again, forever;
//! a message larger than the server's `max_payload` is a permanent one
//! (quarantine, or the dead letters where its scope allows). A process that
//! dies between the acknowledgement and the delete publishes the message
//! again: it carries the message id (`Nats-Msg-Id`,
//! [`Message::message_id`](crate::Message::message_id)), and JetStream drops
//! it when it comes within the stream's **duplicate window** (2 minutes by
//! default). Make the window longer than the longest time between a publish
//! and its redelivery: the claim lease (3 s) plus the backoff of a failing
//! shard, which a failing publish does not lengthen (the message that failed
//! was never stored). A message redelivered after the window (its shard
//! quarantined for longer, say) reaches the stream twice; consumers that
//! must not see it twice record `Nats-Msg-Id` in an inbox
//! (`outbox_seaorm::inbox`).
//!
//! # Headers
//!
//! | header | value |
//! |---|---|
//! | `Nats-Msg-Id` | the message id (a UUID v7) |
//! | `Outbox-Category` | the category name |
//! | `Outbox-Object` | the object identifier |
//! | `Outbox-Shard` | the shard, as `region:0/42` or `control[us]:0/42` |
//! | `Outbox-Row-Id` | the delivered row's id |
//! | `Outbox-Coalesced` | how many rows the message stands for |
//! | `Outbox-Date-Added` | when the oldest of them was written (RFC 3339) |
//! | `traceparent` | the W3C trace context of the writer, if any |
//!
//! The body is the payload's JSON, or empty for a message without payload.

use std::sync::Arc;

use async_nats::header::HeaderMap;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::publish::PublishAck;

use crate::message::Message;
use crate::receiver::{permanent, HandlerError, HandlerFuture};
use crate::registry::{Category, Scope};
use crate::shard::OutboxKind;

/// Header: the category name.
pub const CATEGORY_HEADER: &str = "Outbox-Category";
/// Header: the object identifier.
pub const OBJECT_HEADER: &str = "Outbox-Object";
/// Header: the shard (`region:0/42`, `control[us]:0/42`: kind, region, scope value, identifier).
pub const SHARD_HEADER: &str = "Outbox-Shard";
/// Header: the id of the delivered row.
pub const ROW_ID_HEADER: &str = "Outbox-Row-Id";
/// Header: how many rows the message stands for (coalescing).
pub const COALESCED_HEADER: &str = "Outbox-Coalesced";
/// Header: when the oldest row of the message was written.
pub const DATE_ADDED_HEADER: &str = "Outbox-Date-Added";
/// Header: the W3C trace context of the span that wrote the row.
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// Publishes outbox messages to JetStream, one subject per shard (see the
/// [module docs](self)). Cheap to clone.
#[derive(Clone, Debug)]
pub struct JetStreamSink {
    context: async_nats::jetstream::Context,
    prefix: Arc<str>,
}

/// A subject the sink cannot build: a token that NATS does not allow.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("`{token}` cannot be a NATS subject token ({what}): it must be non-empty, without `.`, `*`, `>` or whitespace")]
pub struct SubjectError {
    /// The token.
    pub token: String,
    /// What it is (the prefix, a region name, a scope name).
    pub what: &'static str,
}

/// A publish that JetStream did not acknowledge.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The subject cannot be built (a region name that is not a subject
    /// token): permanent, since retrying cannot fix it.
    #[error(transparent)]
    Subject(#[from] SubjectError),
    /// The message does not fit the server's `max_payload`: permanent.
    #[error(
        "outbox message {message_id} to `{subject}` is larger than the server accepts: {source}"
    )]
    TooLarge {
        /// The message id.
        message_id: uuid::Uuid,
        /// The subject.
        subject: String,
        /// The client's error.
        source: async_nats::jetstream::context::PublishError,
    },
    /// The publish was not acknowledged: JetStream unreachable, no stream
    /// for the subject, a timeout. Transient: the shard backs off and the
    /// message is published again, with the same `Nats-Msg-Id`.
    #[error("outbox message {message_id} to `{subject}` was not stored by JetStream: {source}")]
    NotStored {
        /// The message id.
        message_id: uuid::Uuid,
        /// The subject.
        subject: String,
        /// The client's error.
        source: async_nats::jetstream::context::PublishError,
    },
}

impl SinkError {
    /// Whether retrying cannot succeed.
    pub fn is_permanent(&self) -> bool {
        matches!(self, SinkError::Subject(_) | SinkError::TooLarge { .. })
    }

    /// As a receiver's error: [`permanent`] when [`is_permanent`](Self::is_permanent).
    pub fn into_handler_error(self) -> HandlerError {
        if self.is_permanent() {
            permanent(self)
        } else {
            self.into()
        }
    }
}

/// Checks a subject token.
fn token(text: &str, what: &'static str) -> Result<(), SubjectError> {
    let invalid = text.is_empty()
        || text
            .chars()
            .any(|c| c == '.' || c == '*' || c == '>' || c.is_whitespace() || c.is_control());
    if invalid {
        return Err(SubjectError {
            token: text.to_owned(),
            what,
        });
    }
    Ok(())
}

impl JetStreamSink {
    /// A sink publishing under `prefix` (one token, e.g. `"outbox"`) on
    /// `context`. Its acknowledgement timeout is the context's (5 s by
    /// default; `async_nats::jetstream::ContextBuilder::ack_timeout`); keep
    /// it below the drain's delivery timeout.
    ///
    /// # Errors
    ///
    /// [`SubjectError`] when `prefix` is not a subject token.
    pub fn new(
        context: async_nats::jetstream::Context,
        prefix: impl Into<String>,
    ) -> Result<Self, SubjectError> {
        let prefix = prefix.into();
        token(&prefix, "the prefix")?;
        Ok(Self {
            context,
            prefix: prefix.into(),
        })
    }

    /// The subject of `message`'s shard.
    ///
    /// # Errors
    ///
    /// [`SubjectError`] when its region name is not a subject token.
    pub fn subject<C: Category>(&self, message: &Message<C>) -> Result<String, SubjectError> {
        let scope = message.scope().name();
        token(scope, "a scope name")?;
        let shard = message.shard_identifier();
        Ok(match message.kind() {
            OutboxKind::Region => format!("{}.region.{scope}.{shard}", self.prefix),
            OutboxKind::Control => {
                let region = message.region_name().unwrap_or_default();
                token(region, "a region name")?;
                format!("{}.control.{region}.{scope}.{shard}", self.prefix)
            }
        })
    }

    /// Publishes `message` and waits for JetStream to store it; the
    /// acknowledgement says whether it was a duplicate (dropped within the
    /// duplicate window).
    ///
    /// # Errors
    ///
    /// [`SinkError`]; nothing was stored unless a duplicate of it was.
    pub async fn publish<C: Category>(
        &self,
        message: &Message<C>,
    ) -> Result<PublishAck, SinkError> {
        let subject = self.subject(message)?;
        let message_id = message.message_id;
        let mut headers = HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, message_id.to_string());
        headers.insert(CATEGORY_HEADER, message.category.name());
        headers.insert(OBJECT_HEADER, message.object_identifier.to_string());
        headers.insert(SHARD_HEADER, message.shard.to_string());
        headers.insert(ROW_ID_HEADER, message.id.to_string());
        headers.insert(COALESCED_HEADER, message.coalesced.to_string());
        headers.insert(DATE_ADDED_HEADER, message.date_added.to_rfc3339());
        if let Some(parent) = message.traceparent {
            headers.insert(TRACEPARENT_HEADER, parent.to_string());
        }
        let payload = message
            .payload
            .as_ref()
            .map(|payload| payload.to_string().into_bytes())
            .unwrap_or_default();
        let error = |source: async_nats::jetstream::context::PublishError| {
            if source.kind() == PublishErrorKind::MaxPayloadExceeded {
                SinkError::TooLarge {
                    message_id,
                    subject: subject.clone(),
                    source,
                }
            } else {
                SinkError::NotStored {
                    message_id,
                    subject: subject.clone(),
                    source,
                }
            }
        };
        let ack = self
            .context
            .send_publish(
                subject.clone(),
                PublishMessage::build()
                    .payload(payload.into())
                    .headers(headers),
            )
            .await
            .map_err(error)?
            .await
            .map_err(error)?;
        if ack.duplicate {
            tracing::debug!(%message_id, %subject, "JetStream dropped a duplicate of an outbox message");
        }
        Ok(ack)
    }

    /// A receiver (for [`Receivers::on`](crate::Receivers::on)) that
    /// publishes each message and returns once it is stored.
    pub fn receiver<C: Category>(
        &self,
    ) -> impl Fn(Message<C>) -> HandlerFuture + Send + Sync + Clone + 'static {
        let sink = self.clone();
        move |message: Message<C>| {
            let sink = sink.clone();
            Box::pin(async move {
                sink.publish(&message)
                    .await
                    .map(drop)
                    .map_err(SinkError::into_handler_error)
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_tokens_are_checked() {
        assert!(token("outbox", "the prefix").is_ok());
        assert!(token("us-east_1", "a region name").is_ok());
        for bad in ["", "a.b", "a*", ">", "a b", "a\tb", "a\0"] {
            assert!(token(bad, "a region name").is_err(), "{bad:?}");
        }
    }
}
