//! Trace context from producer to handler, through a real router, on
//! PostgreSQL and SQLite: the request's span, the write, the delivery and
//! the receiver's own span end up in one trace.
//!
//! Each test installs its own subscriber (a `tracing-opentelemetry` layer
//! over an in-memory span exporter) as the default of its thread, and runs
//! on a current-thread runtime, so every task it spawns sees that
//! subscriber and no other test's.

#![allow(clippy::unwrap_used, missing_docs)]

mod support;

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, TraceId, TracerProvider as _};
use opentelemetry::Value;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData, SpanProcessor};
use outbox_axum::{OutboxCtx, Tx};
use outbox_core::{Drainer, HandlerError, Message, OutboxKind, Receivers};
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, SeaOrmStore, ShardId};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use std::sync::Arc;
use std::time::Duration;
use support::{send, OutboxCategory, TestApp};
use tokio::sync::{mpsc, Notify};
use tracing::Instrument;
use tracing::Level;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;

/// The in-memory exporter, a signal on every span's end, and the guard
/// that keeps the subscriber.
struct Traces {
    exporter: InMemorySpanExporter,
    ended: Arc<Notify>,
    _guard: tracing::subscriber::DefaultGuard,
}

/// Signals the end of every span, after the exporter (processors run in
/// order) has it. Spans may end on another thread, after the code that
/// opened them: SQLite's driver enters a statement's span on its worker
/// thread.
#[derive(Debug)]
struct EndSignal(Arc<Notify>);

impl SpanProcessor for EndSignal {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, _span: SpanData) {
        self.0.notify_waiters();
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

impl Traces {
    /// Exports every span that ends on this thread from now on.
    fn install() -> Self {
        let exporter = InMemorySpanExporter::default();
        let ended = Arc::new(Notify::new());
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .with_span_processor(EndSignal(ended.clone()))
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("outbox-test")))
            // sea-orm's own (trace-level) spans around SQLite transactions
            // stay open after the transaction ends (sea-orm 2.0 over
            // sqlx-sqlite 0.9), and keep the spans above them open: the
            // request's would never end. This test is about the outbox's
            // spans; sea-orm's are left out.
            .with(
                Targets::new()
                    .with_default(Level::TRACE)
                    .with_target("sea_orm", LevelFilter::OFF),
            );
        Self {
            exporter,
            ended,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    /// The spans exported once there are `count` spans of each name in
    /// `names` (waiting for their ends, 20 s at most).
    async fn spans(&self, names: &[(&str, usize)]) -> Vec<SpanData> {
        let complete = |spans: &[SpanData]| {
            names
                .iter()
                .all(|(name, count)| named(spans, name).len() >= *count)
        };
        let wait = async {
            loop {
                let ended = self.ended.notified();
                let spans = self.exporter.get_finished_spans().unwrap();
                if complete(&spans) {
                    return spans;
                }
                ended.await;
            }
        };
        match tokio::time::timeout(Duration::from_secs(20), wait).await {
            Ok(spans) => spans,
            Err(_) => panic!(
                "spans {names:?} did not all end; ended: {:?}",
                self.exporter
                    .get_finished_spans()
                    .unwrap()
                    .iter()
                    .map(|s| s.name.clone())
                    .collect::<Vec<_>>()
            ),
        }
    }
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn only<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "spans named {name}: {found:?}");
    found[0]
}

fn attribute(span: &SpanData, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.clone())
}

/// The app of `support`, delivering to a receiver that opens a `handler`
/// span and reports each message it handled on `delivered`.
async fn traced_app(
    backend: DbBackend,
    label: &str,
) -> (TestApp, mpsc::UnboundedReceiver<Message<OutboxCategory>>) {
    let mut app = TestApp::new(backend, label).await;
    let (tx, delivered) = mpsc::unbounded_channel();
    let mut receivers = Receivers::new();
    for category in [
        OutboxCategory::OrganizationUpdate,
        OutboxCategory::OrganizationAudit,
    ] {
        let tx = tx.clone();
        receivers.register(category, move |message: Message<OutboxCategory>| {
            let tx = tx.clone();
            async move {
                tracing::info!(id = message.id, "replicating");
                tx.send(message)
                    .map_err(|_| HandlerError::from("test ended"))
            }
            .instrument(tracing::info_span!("handler"))
        });
    }
    app.drainer = Drainer::new(SeaOrmStore::new(app.db.db.clone()).unwrap(), receivers);
    (app, delivered)
}

/// Writes one outbox row about organization `org` itself (so that two
/// requests about one organization coalesce), flushed after the commit
/// unless the path says `deferred`.
async fn touch(
    ctx: OutboxCtx,
    tx: Tx,
    Path((mode, org)): Path<(String, i64)>,
) -> impl IntoResponse {
    if mode == "deferred" {
        ctx.defer_flush();
    }
    let message = OutboxMessage::new(
        OutboxCategory::OrganizationUpdate,
        ShardId(org),
        ObjectId(org),
    )
    .with_payload(serde_json::json!({ "org": org }));
    match write_region(&tx, message).await {
        Ok(row) => (StatusCode::CREATED, row.id.to_string()),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
    }
}

fn router(app: &TestApp) -> Router {
    Router::new()
        .route("/touch/{mode}/{org}", post(touch))
        .layer(app.layer())
}

/// Sends a request inside a `request` span of its own (a trace of its own);
/// returns that span's context once the response is in.
///
/// The tests read the request span's ids here rather than wait for it to be
/// exported: on SQLite, sqlx sends a clone of the current span with every
/// command to the connection's worker thread, so when the request span ends
/// depends on that thread (in one CI run it had not ended 20 s later).
async fn traced_request(router: Router, uri: &str) -> SpanContext {
    let span = tracing::info_span!("request", uri);
    let context = {
        use opentelemetry::trace::TraceContextExt;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        span.context().span().span_context().clone()
    };
    let (status, body, _) = send(router, uri).instrument(span).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    context
}

async fn count_rows(app: &TestApp, sql: &str) -> i64 {
    let row = app
        .db
        .db
        .query_one_raw(Statement::from_string(app.backend, sql))
        .await
        .unwrap()
        .unwrap();
    row.try_get("", "n").unwrap()
}

async fn the_request_and_the_handler_share_one_trace(backend: DbBackend) {
    let (app, mut delivered) = traced_app(backend, "trace_flush").await;
    let traces = Traces::install();
    let request = traced_request(router(&app), "/touch/flush/7").await;
    let trace_id = request.trace_id();
    // Flushed before the response: delivered already.
    let message = delivered.try_recv().unwrap();
    assert!(message.synchronous);

    let spans = traces
        .spans(&[
            ("outbox.write_region", 1),
            ("outbox.deliver", 1),
            ("handler", 1),
        ])
        .await;
    let write = only(&spans, "outbox.write_region");
    let deliver = only(&spans, "outbox.deliver");
    let handler = only(&spans, "handler");
    for span in [write, deliver, handler] {
        assert_eq!(span.span_context.trace_id(), trace_id, "{}", span.name);
    }
    // request → write (producer) → deliver (consumer, continued from the
    // stored traceparent) → the receiver's own span.
    assert_eq!(write.parent_span_id, request.span_id());
    assert_eq!(write.span_kind, SpanKind::Producer);
    assert_eq!(deliver.parent_span_id, write.span_context.span_id());
    assert!(deliver.parent_span_is_remote);
    assert_eq!(deliver.span_kind, SpanKind::Consumer);
    assert_eq!(handler.parent_span_id, deliver.span_context.span_id());
    assert_eq!(
        message.traceparent.map(|p| p.span_id()),
        Some(write.span_context.span_id())
    );
    for (key, value) in [
        ("messaging.system", Value::from("outbox")),
        ("messaging.operation.type", Value::from("process")),
        ("messaging.operation.name", Value::from("deliver")),
        (
            "messaging.destination.name",
            Value::from("OrganizationUpdate"),
        ),
        (
            "messaging.message.id",
            Value::from(message.message_id.to_string()),
        ),
        ("outbox.kind", Value::from("region")),
        ("outbox.shard.scope", Value::from("OrganizationScope")),
        ("outbox.shard.identifier", Value::I64(7)),
        ("outbox.synchronous", Value::Bool(true)),
    ] {
        assert_eq!(attribute(deliver, key), Some(value), "{key}");
    }
    assert_eq!(attribute(deliver, "messaging.batch.message_count"), None);
    assert_eq!(
        attribute(write, "messaging.destination.name"),
        Some(Value::from("OrganizationUpdate"))
    );
}

async fn coalesced_requests_deliver_once_under_the_latest_trace(backend: DbBackend) {
    let (app, mut delivered) = traced_app(backend, "trace_coalesce").await;
    let traces = Traces::install();
    let first = traced_request(router(&app), "/touch/deferred/9")
        .await
        .trace_id();
    let latest = traced_request(router(&app), "/touch/deferred/9")
        .await
        .trace_id();
    assert_ne!(first, latest);
    assert!(delivered.try_recv().is_err(), "deferred: nothing flushed");

    // The background drain, outside any span, as a worker runs it.
    let report = app.drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.deliveries, report.rows_deleted), (1, 2));
    let message = delivered.try_recv().unwrap();
    assert_eq!(message.coalesced, 2);
    assert!(!message.synchronous);

    let spans = traces
        .spans(&[
            ("outbox.write_region", 2),
            ("outbox.deliver", 1),
            ("handler", 1),
        ])
        .await;
    let writes = named(&spans, "outbox.write_region");
    assert_eq!(writes.len(), 2);
    let (first_write, latest_write) = if writes[0].span_context.trace_id() == first {
        (writes[0], writes[1])
    } else {
        (writes[1], writes[0])
    };
    assert_eq!(first_write.span_context.trace_id(), first);
    assert_eq!(latest_write.span_context.trace_id(), latest);
    let deliver = only(&spans, "outbox.deliver");
    assert_eq!(deliver.span_context.trace_id(), latest);
    assert_eq!(deliver.parent_span_id, latest_write.span_context.span_id());
    let links: Vec<(TraceId, SpanId)> = deliver
        .links
        .links
        .iter()
        .map(|link| (link.span_context.trace_id(), link.span_context.span_id()))
        .collect();
    assert_eq!(links, [(first, first_write.span_context.span_id())]);
    assert_eq!(
        attribute(deliver, "messaging.batch.message_count"),
        Some(Value::I64(2))
    );
    assert_eq!(
        attribute(deliver, "outbox.synchronous"),
        Some(Value::Bool(false))
    );
    let handler = only(&spans, "handler");
    assert_eq!(handler.parent_span_id, deliver.span_context.span_id());
}

async fn rows_written_outside_any_span_store_null_and_deliver(backend: DbBackend) {
    let (app, mut delivered) = traced_app(backend, "trace_none").await;
    // No OpenTelemetry layer yet: nothing to store.
    let (status, body, _) = send(router(&app), "/touch/deferred/11").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let nulls = "SELECT count(*) AS n FROM region_outbox WHERE traceparent IS NULL";
    assert_eq!(count_rows(&app, nulls).await, 1);

    let traces = Traces::install();
    let report = app.drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 1);
    assert_eq!(delivered.try_recv().unwrap().traceparent, None);
    let spans = traces.spans(&[("outbox.deliver", 1), ("handler", 1)]).await;
    let deliver = only(&spans, "outbox.deliver");
    assert_eq!(
        deliver.parent_span_id,
        SpanId::INVALID,
        "a trace of its own"
    );
    assert!(deliver.links.links.is_empty());
    let handler = only(&spans, "handler");
    assert_eq!(handler.parent_span_id, deliver.span_context.span_id());
}

async fn a_garbage_traceparent_in_the_database_delivers_without_a_parent(backend: DbBackend) {
    let (app, mut delivered) = traced_app(backend, "trace_garbage").await;
    let traces = Traces::install();
    let request = traced_request(router(&app), "/touch/deferred/12").await;
    let stored = "SELECT count(*) AS n FROM region_outbox WHERE length(traceparent) = 55";
    assert_eq!(count_rows(&app, stored).await, 1);
    app.db
        .db
        .execute_unprepared("UPDATE region_outbox SET traceparent = '00-not-a-trace-context'")
        .await
        .unwrap();

    let report = app.drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.deliveries, report.failures.len()), (1, 0));
    assert_eq!(delivered.try_recv().unwrap().traceparent, None);
    let spans = traces.spans(&[("outbox.deliver", 1), ("handler", 1)]).await;
    let deliver = only(&spans, "outbox.deliver");
    assert_eq!(deliver.parent_span_id, SpanId::INVALID);
    assert_ne!(deliver.span_context.trace_id(), request.trace_id());
    assert_eq!(
        only(&spans, "handler").parent_span_id,
        deliver.span_context.span_id()
    );
}

/// Current-thread runtimes: the subscriber is this thread's default.
macro_rules! on_both_backends_current_thread {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(sea_orm::DbBackend::Postgres).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(sea_orm::DbBackend::Sqlite).await;
                }
            )*
        }
    };
}

on_both_backends_current_thread!(
    the_request_and_the_handler_share_one_trace,
    coalesced_requests_deliver_once_under_the_latest_trace,
    rows_written_outside_any_span_store_null_and_deliver,
    a_garbage_traceparent_in_the_database_delivers_without_a_parent,
);
