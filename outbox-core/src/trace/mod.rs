//! Trace context from producer to handler.
//!
//! Every outbox row stores the W3C `traceparent` of the span that wrote it
//! (a nullable `traceparent` column), and every delivery continues that
//! trace: a request's span, the row it wrote, and the receiver's work on it
//! end up in one trace, however long the row waited and whichever process
//! delivered it.
//!
//! # Writing
//!
//! The write API (`outbox_seaorm::write_region` and friends, and
//! `MemoryStore::write`) stores [`TraceParent::current`]: the OpenTelemetry
//! context of the current `tracing` span (with `outbox-seaorm`, the
//! `outbox.write_*` span of the write itself, a child of your request's
//! span). Outside any span, or without an OpenTelemetry layer, it stores
//! `NULL` and nothing else changes. A stored value that does not parse as a
//! `traceparent` is ignored when the row is read: the row is delivered
//! normally, without a parent. Only the `traceparent` travels, not
//! `tracestate` or baggage.
//!
//! # The delivery span
//!
//! Each delivery runs in a span named `outbox.deliver`, of kind `consumer`,
//! around the receiver: spans the receiver opens are its children. Its
//! OpenTelemetry parent is the `traceparent` of the delivered (newest) row;
//! the older rows coalesced into the delivery whose traces differ from it
//! become span links (one per trace, at most [`MAX_TRACE_LINKS`]). A row
//! without a `traceparent` leaves the span under its contextual parent (the
//! request's span in a flush after a commit, none in the background
//! worker). Its attributes follow OpenTelemetry's semantic conventions for
//! messaging:
//!
//! | attribute | value |
//! |---|---|
//! | `messaging.system` | `outbox` ([`MESSAGING_SYSTEM`]) |
//! | `messaging.operation.type` | `process` |
//! | `messaging.operation.name` | `deliver` |
//! | `messaging.destination.name` | the category's name, e.g. `OrganizationUpdate` |
//! | `messaging.message.id` | the message id of the delivered row (a UUID) |
//! | `messaging.batch.message_count` | rows acknowledged by the delivery, when more than one (coalesced); absent for one, as the conventions ask |
//! | `outbox.kind` | `region` or `control` |
//! | `outbox.shard.scope` | the scope's name |
//! | `outbox.shard.identifier` | the shard identifier |
//! | `outbox.shard.region` | the target region (control outbox only) |
//! | `outbox.synchronous` | `true` in the flush after a commit |
//! | `error.type` | on failure: `handler`, `permanent`, `panic` or `timeout` (the `reason` of `outbox.delivery_failed`) |
//! | `otel.status_code` | `error` on failure |
//!
//! For logs the span also keeps the fields it always had: `category`,
//! `shard`, `id`, `object_identifier`, `coalesced`, `synchronous`.
//!
//! # What the application installs
//!
//! A `tracing-opentelemetry` layer over its tracer provider, of the versions
//! this crate uses (`tracing-opentelemetry` 0.34 over `opentelemetry` 0.33):
//! the layer is found by its type, so a layer of another version is not
//! seen, and then rows store `NULL` and deliveries start traces of their
//! own. Everything else works the same without any layer.
//!
//! # Example
//!
//! ```
//! outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 } }
//! use opentelemetry::trace::TracerProvider as _;
//! use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
//! use outbox_core::{Drainer, MemoryStore, Message, Receivers, ShardKey};
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! let exporter = InMemorySpanExporter::default();
//! let provider = SdkTracerProvider::builder()
//!     .with_simple_exporter(exporter.clone())
//!     .build();
//! let subscriber = tracing_subscriber::registry()
//!     .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("app")));
//! let _guard = tracing::subscriber::set_default(subscriber);
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let shard = ShardKey::region(OutboxScope::OrgScope, 1);
//! let id = tracing::info_span!("request")
//!     .in_scope(|| store.write(&shard, OutboxCategory::OrgUpdate, 1, None));
//! let receivers = Receivers::new().on(OutboxCategory::OrgUpdate, |_: Message<OutboxCategory>| async {
//!     Ok::<_, outbox_core::HandlerError>(())
//! });
//! Drainer::new(store, receivers).drain_shard(&shard, Some(id)).await.unwrap();
//! # });
//!
//! let spans = exporter.get_finished_spans().unwrap();
//! let request = spans.iter().find(|s| s.name == "request").unwrap();
//! let deliver = spans.iter().find(|s| s.name == "outbox.deliver").unwrap();
//! assert_eq!(deliver.parent_span_id, request.span_context.span_id());
//! assert_eq!(deliver.span_context.trace_id(), request.span_context.trace_id());
//! ```

mod traceparent;

pub use traceparent::{InvalidTraceParent, TraceParent, TRACEPARENT_LEN};

/// The `messaging.system` of delivery spans.
pub const MESSAGING_SYSTEM: &str = "outbox";

/// At most this many span links on one delivery span: the traces of rows
/// coalesced into it, oldest first. (OpenTelemetry SDKs keep 128 links per
/// span by default.)
pub const MAX_TRACE_LINKS: usize = 32;
