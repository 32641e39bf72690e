//! One receiver call, and one call of a batch handler: the message, its
//! span, the timeout, panics caught, the delivery metrics.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use tracing::Instrument;

use super::engine::{Engine, DELIVERING};
use super::observe;
use super::report::DeliveryError;
use super::span;
use crate::coalesce::CoalescingGroup;
use crate::fence_token::FencingToken;
use crate::message::Message;
use crate::receiver::{BatchItem, Handler, HandlerError};
use crate::registry::{Category, Scope};
use crate::shard::{OutboxKind, ShardKey};

/// One receiver call, ready to be made.
pub(crate) struct Call<C: Category> {
    pub(crate) category: C,
    pub(crate) handler: Handler<C>,
    pub(crate) message: Message<C>,
    pub(crate) span: tracing::Span,
    pub(crate) stack: Arc<Vec<ShardKey>>,
    /// For the delivery metrics, once it is back.
    lag_group: LagGroup,
}

/// What the delivered-lag metric needs of a group.
struct LagGroup {
    first_scheduled_from: chrono::DateTime<chrono::Utc>,
    first_added: chrono::DateTime<chrono::Utc>,
}

impl<C: Category> Call<C> {
    /// Whether the receiver is a batch handler.
    pub(crate) fn is_batch(&self) -> bool {
        matches!(self.handler, Handler::Batch(_))
    }
}

/// Builds the call of one coalescing group: its receiver, message and span.
pub(crate) fn prepare<C: Category>(
    drainer: &Engine<C>,
    group: &mut CoalescingGroup,
    fence: FencingToken,
    synchronous: bool,
    stack: &Arc<Vec<ShardKey>>,
) -> Result<Call<C>, DeliveryError> {
    let newest = &group.newest;
    let category = C::try_from(newest.category).map_err(|unknown| {
        observe::unknown_category(newest, unknown.0);
        DeliveryError::UnknownCategory(unknown)
    })?;
    let expected_scope = category.scope().value();
    if expected_scope != newest.shard.scope() {
        return Err(DeliveryError::ScopeMismatch {
            category: category.name(),
            expected_scope,
            row_scope: newest.shard.scope(),
        });
    }
    let handler = drainer
        .receivers()
        .handler(category)
        .ok_or(DeliveryError::NoReceiver {
            category: category.name(),
        })?
        .clone();
    // Moved, not copied: the group needs its ids after the delivery, not
    // its payload (a retry reads the row again).
    let payload = group.newest.payload.take();
    let newest = &group.newest;
    let message = Message {
        id: newest.id,
        first_id: group.first.id,
        coalesced: group.ids.len(),
        shard: newest.shard.clone(),
        fence,
        category,
        object_identifier: newest.object_identifier,
        payload,
        date_added: group.first.date_added,
        scheduled_for: newest.scheduled_for,
        scheduled_from: newest.scheduled_from,
        synchronous,
        traceparent: newest.traceparent,
        message_id: newest.message_id,
        payload_version: newest.payload_version,
    };
    Ok(Call {
        category,
        handler,
        message,
        span: span::delivery_span(category, group, synchronous),
        stack: stack.clone(),
        lag_group: LagGroup {
            first_scheduled_from: group.first.scheduled_from,
            first_added: group.first.date_added,
        },
    })
}

/// What a call's metrics and span need once it is back.
struct CallMeta<C: Category> {
    category: C,
    span: tracing::Span,
    lag_group: LagGroup,
    synchronous: bool,
    kind: OutboxKind,
}

impl<C: Category> CallMeta<C> {
    fn of(call: &Call<C>) -> Self {
        Self {
            category: call.category,
            span: call.span.clone(),
            lag_group: LagGroup {
                first_scheduled_from: call.lag_group.first_scheduled_from,
                first_added: call.lag_group.first_added,
            },
            synchronous: call.message.synchronous,
            kind: call.message.shard.kind(),
        }
    }

    /// Records a call's result in the metrics and its span.
    fn finish(
        self,
        drainer: &Engine<C>,
        result: Result<(), DeliveryError>,
        elapsed: std::time::Duration,
    ) -> Result<C, DeliveryError> {
        let name = self.category.name();
        observe::send_duration(name, self.kind, self.synchronous, elapsed);
        match result {
            Ok(()) => {
                observe::delivered_lag(
                    name,
                    self.kind,
                    self.lag_group.first_scheduled_from,
                    self.lag_group.first_added,
                    self.synchronous,
                    drainer.now(),
                );
                Ok(self.category)
            }
            Err(error) => {
                span::delivery_failed(&self.span, error.reason());
                Err(error)
            }
        }
    }
}

/// What a receiver's call came back with: its result, a panic, or the
/// timeout's end.
type Answer<T> = Result<std::thread::Result<T>, tokio::time::error::Elapsed>;

/// Makes one call: the receiver with one message (a batch handler with a
/// batch of one).
pub(crate) async fn call_one<C: Category>(
    drainer: &Engine<C>,
    call: Call<C>,
) -> Result<C, DeliveryError> {
    let meta = CallMeta::of(&call);
    let Call {
        category,
        handler,
        message,
        span,
        stack,
        ..
    } = call;
    let timeout = drainer.config().delivery_timeout;
    let started = Instant::now();
    let delivery = crate::message::CurrentDelivery {
        message_id: message.message_id,
        shard: message.shard.clone(),
        fence: message.fence,
        category: category.name(),
    };
    let result = match handler {
        Handler::One(handler) => {
            // The span is entered while the handler's future is built too: a
            // receiver that opens its span before its first `.await` nests it
            // there.
            let call = span.in_scope(|| AssertUnwindSafe(handler(message)).catch_unwind());
            let call = crate::message::with_delivery(delivery, call);
            let answer = DELIVERING
                .scope(stack, tokio::time::timeout(timeout, call))
                .instrument(span.clone())
                .await;
            match answer {
                Err(_elapsed) => Err(DeliveryError::Timeout(timeout)),
                Ok(Err(panic)) => Err(DeliveryError::Panicked(panic_message(panic.as_ref()))),
                Ok(Ok(result)) => result.map_err(DeliveryError::Handler),
            }
        }
        Handler::Batch(handler) => {
            let item = BatchItem::new(message, span.clone());
            let call = span.in_scope(|| AssertUnwindSafe(handler(vec![item])).catch_unwind());
            let answer = DELIVERING
                .scope(stack, tokio::time::timeout(timeout, call))
                .instrument(span.clone())
                .await;
            batch_results(answer, 1, timeout).remove(0)
        }
    };
    let elapsed = started.elapsed();
    drainer.planner().pace().observe(elapsed);
    meta.finish(drainer, result, elapsed)
}

/// Makes one batch call of `calls`, all of one category with a batch
/// handler, each from a different shard: one result per call, in order.
pub(crate) async fn call_batch<C: Category>(
    drainer: &Engine<C>,
    handler: Handler<C>,
    calls: Vec<Call<C>>,
    stack: Arc<Vec<ShardKey>>,
) -> Vec<Result<C, DeliveryError>> {
    let Handler::Batch(batch_handler) = handler else {
        // Not a batch handler: one call after the other.
        let mut results = Vec::with_capacity(calls.len());
        for call in calls {
            results.push(call_one(drainer, call).await);
        }
        return results;
    };
    let count = calls.len();
    let metas: Vec<CallMeta<C>> = calls.iter().map(CallMeta::of).collect();
    let items = calls
        .into_iter()
        .map(|call| BatchItem::new(call.message, call.span))
        .collect();
    let timeout = drainer.config().delivery_timeout;
    let started = Instant::now();
    let answer = DELIVERING
        .scope(
            stack,
            tokio::time::timeout(
                timeout,
                AssertUnwindSafe(batch_handler(items)).catch_unwind(),
            ),
        )
        .await;
    let elapsed = started.elapsed();
    // The pace wants the time of one delivery slot: a wave of `count`
    // messages stands for `count ÷ concurrency` rounds of single deliveries.
    let slots = count.div_ceil(drainer.config().concurrency.max(1)).max(1);
    drainer
        .planner()
        .pace()
        .observe(elapsed / u32::try_from(slots).unwrap_or(u32::MAX));
    batch_results(answer, count, timeout)
        .into_iter()
        .zip(metas)
        .map(|(result, meta)| meta.finish(drainer, result, elapsed))
        .collect()
}

/// One result per message of a batch call of `count`: the timeout or a
/// panic fails them all, and a message the handler left without a result
/// fails (transient).
fn batch_results(
    answer: Answer<Vec<Result<(), HandlerError>>>,
    count: usize,
    timeout: std::time::Duration,
) -> Vec<Result<(), DeliveryError>> {
    match answer {
        Err(_elapsed) => (0..count)
            .map(|_| Err(DeliveryError::Timeout(timeout)))
            .collect(),
        Ok(Err(panic)) => {
            let text = panic_message(panic.as_ref());
            (0..count)
                .map(|_| Err(DeliveryError::Panicked(text.clone())))
                .collect()
        }
        Ok(Ok(results)) => {
            let answered = results.len();
            let mut results: Vec<_> = results
                .into_iter()
                .take(count)
                .map(|result| result.map_err(DeliveryError::Handler))
                .collect();
            while results.len() < count {
                results.push(Err(DeliveryError::Handler(missing(count, answered))));
            }
            results
        }
    }
}

/// A batch handler answered fewer results than it was given messages.
fn missing(count: usize, answered: usize) -> HandlerError {
    format!(
        "the batch receiver answered {answered} results for {count} messages; a message \
         without a result counts as failed (transient) and is delivered again"
    )
    .into()
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
