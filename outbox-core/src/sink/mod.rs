//! Sinks: receivers that forward an outbox's messages to a broker, so that
//! many services can consume them without each being a receiver of the
//! outbox (and without one slow consumer holding every shard).
//!
//! A sink is a receiver like any other: the drain still delivers each shard
//! in order, one message at a time, and deletes the rows only once the sink
//! has returned, which it does only once the broker has *stored* the message.
//! What the broker adds is fan-out and replay: any number of consumers, each
//! at its own pace, from any position.
//!
//! - `jetstream` (feature `nats`): NATS JetStream, with the message id as
//!   `Nats-Msg-Id`, so that JetStream's duplicate window drops redeliveries.

#[cfg(feature = "nats")]
#[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
pub mod jetstream;
