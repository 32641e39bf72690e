//! Publishing a batch pipelined: the messages of many shards at once,
//! their acknowledgements on one inbox (see [the module
//! documentation](super#pipelined-publishes-and-order)).

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::publish::PublishAck;
use futures::StreamExt;
use tracing::Instrument;

use super::{JetStreamError, JetStreamSink, Outgoing};
use crate::message::Message;
use crate::receiver::BatchItem;
use crate::registry::Category;

impl JetStreamSink {
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
        let Outgoing {
            subject,
            headers,
            body,
        } = self.outgoing(message)?;
        tracing::Span::current().record("messaging.destination.name", subject.as_str());
        let sent = client
            .publish_with_reply_and_headers(subject.clone(), reply, headers, body.into())
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
        // Read in one pass (the client's untagged `Response` buffers the
        // whole reply first): an error, or the acknowledgement.
        #[derive(serde::Deserialize)]
        struct Reply {
            #[serde(default)]
            error: Option<async_nats::jetstream::Error>,
            #[serde(default)]
            stream: String,
            #[serde(default)]
            seq: Option<u64>,
            #[serde(default)]
            domain: String,
            #[serde(default)]
            duplicate: bool,
        }
        let parsed = serde_json::from_slice::<Reply>(reply.payload.as_ref())
            .map_err(|error| failed(PublishError::with_source(PublishErrorKind::Other, error)))?;
        let acknowledgement = match parsed {
            Reply {
                error: Some(error), ..
            } => {
                return Err(failed(PublishError::with_source(
                    PublishErrorKind::Other,
                    error,
                )))
            }
            Reply { seq: None, .. } => {
                return Err(failed(PublishError::with_source(
                    PublishErrorKind::Other,
                    "JetStream answered neither an acknowledgement nor an error",
                )))
            }
            Reply {
                stream,
                seq: Some(sequence),
                domain,
                duplicate,
                ..
            } => PublishAck {
                stream,
                sequence,
                domain,
                duplicate,
                ..PublishAck::default()
            },
        };
        if acknowledgement.duplicate {
            self.duplicate(&subject, message, &acknowledgement);
        }
        Ok(acknowledgement)
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
