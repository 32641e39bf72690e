//! The delivery span continues the trace of the span that wrote the row
//! (in-memory store; the database stores are tested in `outbox-axum`).

#![allow(clippy::unwrap_used, missing_docs)]

use opentelemetry::trace::{SpanKind, Status, TracerProvider as _};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use outbox_core::{
    Drainer, HandlerError, MemoryStore, Message, OutboxKind, Receivers, ShardKey, TraceParent,
};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

outbox_core::registry! {
    OrgScope = 0 {
        OrgUpdate = 1,
    }
}

/// Runs `test` on a current-thread runtime under a subscriber that exports
/// every finished span to memory (this thread only); returns the spans.
fn traced<F: std::future::Future<Output = ()>>(test: impl FnOnce() -> F) -> Vec<SpanData> {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("outbox-test")));
    tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(test());
    });
    exporter.get_finished_spans().unwrap()
}

fn span<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let mut found = spans.iter().filter(|s| s.name == name);
    let first = found.next().unwrap_or_else(|| panic!("no span {name}"));
    assert!(found.next().is_none(), "more than one span {name}");
    first
}

fn attribute(span: &SpanData, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.clone())
}

/// A receiver that opens a span of its own, as real handlers do.
fn receivers(fail: bool) -> Receivers<OutboxCategory> {
    Receivers::new().on(
        OutboxCategory::OrgUpdate,
        move |message: Message<OutboxCategory>| {
            async move {
                tracing::info!(id = message.id, "handled");
                if fail {
                    return Err(HandlerError::from("refused"));
                }
                Ok(())
            }
            .instrument(tracing::info_span!("handler"))
        },
    )
}

#[test]
fn the_delivery_continues_the_writers_trace_with_messaging_attributes() {
    let spans = traced(|| async {
        let store = MemoryStore::new();
        let shard = ShardKey::region(OutboxScope::OrgScope, 7);
        let request = tracing::info_span!("request");
        let (id, written) = request.in_scope(|| {
            let id = store.write(&shard, OutboxCategory::OrgUpdate, 70, None);
            (id, TraceParent::current().unwrap())
        });
        drop(request);
        assert_eq!(store.rows(OutboxKind::Region)[0].traceparent, Some(written));
        let drainer = Drainer::new(store, receivers(false));
        drainer.drain_shard(&shard, Some(id)).await.unwrap();
    });
    let request = span(&spans, "request");
    let deliver = span(&spans, "outbox.deliver");
    let handler = span(&spans, "handler");
    let trace_id = request.span_context.trace_id();
    assert_eq!(deliver.span_context.trace_id(), trace_id);
    assert_eq!(handler.span_context.trace_id(), trace_id);
    assert_eq!(deliver.parent_span_id, request.span_context.span_id());
    assert!(
        deliver.parent_span_is_remote,
        "continued from the stored row"
    );
    assert_eq!(handler.parent_span_id, deliver.span_context.span_id());
    assert_eq!(deliver.span_kind, SpanKind::Consumer);
    assert!(deliver.links.links.is_empty());
    for (key, value) in [
        ("messaging.system", Value::from("outbox")),
        ("messaging.operation.type", Value::from("process")),
        ("messaging.operation.name", Value::from("deliver")),
        ("messaging.destination.name", Value::from("OrgUpdate")),
        ("outbox.kind", Value::from("region")),
        ("outbox.shard.scope", Value::from("OrgScope")),
        ("outbox.shard.identifier", Value::I64(7)),
        ("outbox.synchronous", Value::Bool(true)),
    ] {
        assert_eq!(attribute(deliver, key), Some(value), "{key}");
    }
    // The message id, a UUID v7 assigned at write time.
    let message_id = attribute(deliver, "messaging.message.id").expect("a message id");
    let message_id: outbox_core::uuid::Uuid = message_id.as_str().parse().unwrap();
    assert_eq!(message_id.get_version_num(), 7);
    // One message: no batch count (the conventions set it on batches only).
    assert_eq!(attribute(deliver, "messaging.batch.message_count"), None);
    assert_eq!(attribute(deliver, "error.type"), None);
    assert_eq!(deliver.status, Status::Unset);
}

#[test]
fn coalesced_rows_of_other_traces_become_links() {
    let spans = traced(|| async {
        let store = MemoryStore::new();
        let shard = ShardKey::region(OutboxScope::OrgScope, 1);
        // Three requests, three traces, one object; the last one wins. The
        // second trace writes twice: one link for it, not two.
        for (request, writes) in [("first", 1), ("second", 2), ("third", 1)] {
            tracing::info_span!("request", name = request).in_scope(|| {
                for _ in 0..writes {
                    store.write(&shard, OutboxCategory::OrgUpdate, 1, None);
                }
            });
        }
        // A fourth row, written outside any span, coalesces in too.
        store.write(&shard, OutboxCategory::OrgUpdate, 1, None);
        tracing::info_span!("request", name = "last").in_scope(|| {
            store.write(&shard, OutboxCategory::OrgUpdate, 1, None);
        });
        let drainer = Drainer::new(store, receivers(false));
        let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
        assert_eq!((report.deliveries, report.rows_deleted), (1, 6));
    });
    let requests: Vec<&SpanData> = spans.iter().filter(|s| s.name == "request").collect();
    assert_eq!(requests.len(), 4);
    let deliver = span(&spans, "outbox.deliver");
    let last = requests.last().unwrap();
    assert_eq!(deliver.parent_span_id, last.span_context.span_id());
    assert_eq!(
        deliver.span_context.trace_id(),
        last.span_context.trace_id()
    );
    let linked: Vec<_> = deliver
        .links
        .links
        .iter()
        .map(|link| link.span_context.trace_id())
        .collect();
    // first, second (once), third: in id order, the last one's trace excluded.
    let expected: Vec<_> = requests[..3]
        .iter()
        .map(|request| request.span_context.trace_id())
        .collect();
    assert_eq!(linked, expected);
    assert_eq!(
        attribute(deliver, "messaging.batch.message_count"),
        Some(Value::I64(6))
    );
    let handler = span(&spans, "handler");
    assert_eq!(handler.parent_span_id, deliver.span_context.span_id());
}

#[test]
fn a_row_written_outside_any_span_has_no_traceparent_and_delivers() {
    let spans = traced(|| async {
        let store = MemoryStore::new();
        let shard = ShardKey::region(OutboxScope::OrgScope, 2);
        let id = store.write(&shard, OutboxCategory::OrgUpdate, 2, None);
        assert_eq!(store.rows(OutboxKind::Region)[0].traceparent, None);
        let drainer = Drainer::new(store, receivers(false));
        drainer.drain_shard(&shard, Some(id)).await.unwrap();
    });
    let deliver = span(&spans, "outbox.deliver");
    // A trace of its own, started by the delivery.
    assert_eq!(
        deliver.parent_span_id,
        opentelemetry::trace::SpanId::INVALID
    );
    assert!(deliver.links.links.is_empty());
    let handler = span(&spans, "handler");
    assert_eq!(handler.parent_span_id, deliver.span_context.span_id());
}

#[test]
fn a_failed_delivery_marks_its_span_with_the_error_type() {
    let spans = traced(|| async {
        let store = MemoryStore::new();
        let shard = ShardKey::region(OutboxScope::OrgScope, 3);
        let id = tracing::info_span!("request")
            .in_scope(|| store.write(&shard, OutboxCategory::OrgUpdate, 3, None));
        let drainer = Drainer::new(store, receivers(true));
        assert!(drainer.drain_shard(&shard, Some(id)).await.is_err());
    });
    let deliver = span(&spans, "outbox.deliver");
    assert_eq!(
        attribute(deliver, "error.type"),
        Some(Value::from("handler"))
    );
    assert!(
        matches!(deliver.status, Status::Error { .. }),
        "{:?}",
        deliver.status
    );
}

#[test]
fn without_an_opentelemetry_layer_rows_store_nothing_and_deliver() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = MemoryStore::new();
        let shard = ShardKey::region(OutboxScope::OrgScope, 4);
        let id = tracing::info_span!("request")
            .in_scope(|| store.write(&shard, OutboxCategory::OrgUpdate, 4, None));
        assert_eq!(store.rows(OutboxKind::Region)[0].traceparent, None);
        let drainer = Drainer::new(store.clone(), receivers(false));
        drainer.drain_shard(&shard, Some(id)).await.unwrap();
        assert!(store.rows(OutboxKind::Region).is_empty());
    });
}
