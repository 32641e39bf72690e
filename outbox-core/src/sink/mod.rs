//! Sinks: receivers that forward an outbox's messages to a message broker,
//! so that any number of services consume them, each at its own pace,
//! without being receivers of the outbox themselves.
//!
//! A sink is a receiver like any other: the drain delivers a shard's
//! messages in order, one at a time, and deletes their rows only after the
//! sink has returned, which it does only once the broker has *stored* the
//! message. So the outbox's guarantees reach the broker: nothing is lost
//! (a failed publish holds the shard, which backs off and retries), a
//! shard's messages reach the broker in order, and a message published
//! twice (a crash between the broker's acknowledgement and the outbox
//! delete) carries the same [`message_id`](crate::Message::message_id)
//! both times, by which the broker, or failing that the consumer, drops the
//! second copy.
//!
//! Sinks differ from receivers that apply a change: a slow or stopped
//! consumer of the broker holds no shard, and consumers can be added later
//! and replay what the broker kept.
//!
//! - `jetstream` (feature `nats`): NATS JetStream, one subject per shard,
//!   the message id as `Nats-Msg-Id` so that the stream's duplicate window
//!   drops redeliveries.
//! - `webhook` (feature `webhook`): an HTTP `POST` per message to an
//!   endpoint, signed per Standard Webhooks, the message id as
//!   `webhook-id` so that the endpoint applies a redelivery once.
//!
//! Either sink can describe its messages as CloudEvents 1.0, opt-in:
//! `cloudevents` (with feature `webhook` or `nats`).

#[cfg(any(feature = "nats", feature = "webhook"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "nats", feature = "webhook"))))]
pub mod cloudevents;

#[cfg(feature = "nats")]
#[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
pub mod jetstream;

#[cfg(feature = "webhook")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhook")))]
pub mod webhook;
