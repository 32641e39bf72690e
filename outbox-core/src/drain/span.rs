//! The delivery span: `outbox.deliver`, after OpenTelemetry's messaging
//! semantic conventions (see [`crate::trace`] for its attributes).

use tracing::field::Empty;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::coalesce::CoalescingGroup;
use crate::registry::{Category, Scope};
use crate::shard::OutboxKind;

/// The span a delivery runs in: the receiver's own spans are its children.
///
/// Its OpenTelemetry parent is the trace context of the group's newest row,
/// when it has one; the other traces of the group are links.
pub(crate) fn delivery_span<C: Category>(
    category: C,
    group: &CoalescingGroup,
    synchronous: bool,
) -> Span {
    let newest = &group.newest;
    // As i64: `tracing-opentelemetry` records u64 (and usize) values as text.
    let rows = i64::try_from(group.ids.len()).unwrap_or(i64::MAX);
    let span = tracing::info_span!(
        "outbox.deliver",
        otel.kind = "consumer",
        messaging.system = crate::trace::MESSAGING_SYSTEM,
        messaging.operation.type = "process",
        messaging.operation.name = "deliver",
        messaging.destination.name = category.name(),
        messaging.message.id = %newest.message_id,
        messaging.batch.message_count = Empty,
        outbox.kind = newest.shard.kind().as_str(),
        outbox.shard.scope = category.scope().name(),
        outbox.shard.identifier = newest.shard.identifier(),
        outbox.shard.region = Empty,
        outbox.synchronous = synchronous,
        error.type = Empty,
        otel.status_code = Empty,
        // For logs, as before.
        category = category.name(),
        shard = %newest.shard,
        id = newest.id,
        object_identifier = newest.object_identifier,
        coalesced = rows,
        synchronous,
    );
    // The conventions set the count on batches only, not on one message.
    if rows > 1 {
        span.record("messaging.batch.message_count", rows);
    }
    if newest.shard.kind() == OutboxKind::Control {
        span.record("outbox.shard.region", newest.shard.region_name());
    }
    if let Some(parent) = newest.traceparent {
        // Fails only without an OpenTelemetry layer (nothing to continue
        // then) or for a span already started (not this new one): either
        // way the delivery goes on, under its contextual parent.
        let _ = span.set_parent(parent.context());
    }
    for linked in &group.linked_traces {
        span.add_link(linked.span_context());
    }
    span
}

/// Marks the delivery span as failed, with the error's reason (as the
/// `reason` tag of `outbox.delivery_failed`).
pub(crate) fn delivery_failed(span: &Span, reason: &'static str) {
    span.record("error.type", reason);
    span.record("otel.status_code", "error");
}
