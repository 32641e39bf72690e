//! The JetStream sink against a real `nats-server` (Debian's, started by
//! `outbox_testing::nats::NatsServer`), drained from `MemoryStore`:
//! subjects and headers, order, acknowledgements awaited before the rows
//! go, duplicates dropped by the stream, and the typed errors.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_core::sink::jetstream::{
    async_nats, InvalidSubject, JetStreamError, JetStreamSink, SubjectPart, CATEGORY_HEADER,
    COALESCED_HEADER, DATE_ADDED_HEADER, MESSAGE_ID_HEADER, OBJECT_HEADER, ROW_ID_HEADER,
    SHARD_HEADER, TRACEPARENT_HEADER,
};
use outbox_core::store::{quarantined_until, StoreAdmin};
use outbox_core::{
    BackoffPolicy, DeliveryError, DrainConfig, DrainReport, Drainer, HandlerError, MemoryStore,
    Message, OutboxKind, Receivers, ShardKey,
};
use outbox_testing::nats::{read_stream, NatsServer};
use serde_json::json;

outbox_core::registry! {
    ShopScope = 0 (shard_field = "shop_id") {
        PriceChanged = 1 (no_coalesce),
        ProductUpdate = 2,
    }
}

const STREAM: &str = "OUTBOX";
/// The longest wait for one message when reading the stream back.
const READ_WAIT: Duration = Duration::from_secs(10);

fn shop(id: i64) -> ShardKey {
    ShardKey::region(OutboxScope::ShopScope, id)
}

/// Every span of this test binary goes to the returned exporter, under a
/// global subscriber installed by the first call: a thread's own subscriber
/// would race with the other tests for `tracing`'s per-callsite cache.
/// Every test calls it (through [`jetstream`]), so every test publishes the
/// same way.
fn exported_spans() -> opentelemetry_sdk::trace::InMemorySpanExporter {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use tracing_subscriber::layer::SubscriberExt;

    static EXPORTER: std::sync::OnceLock<InMemorySpanExporter> = std::sync::OnceLock::new();
    EXPORTER
        .get_or_init(|| {
            let exporter = InMemorySpanExporter::default();
            let provider = SdkTracerProvider::builder()
                .with_simple_exporter(exporter.clone())
                .build();
            let subscriber = tracing_subscriber::registry()
                .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("outbox-test")));
            tracing::subscriber::set_global_default(subscriber).unwrap();
            exporter
        })
        .clone()
}

/// How long a publish waits for its acknowledgement (5 s by default), so
/// that a stopped server fails a delivery fast.
const ACK_TIMEOUT_MS: u64 = 500;

/// A JetStream context on `server` whose acknowledgements time out after
/// [`ACK_TIMEOUT_MS`]; with the tests' subscriber installed.
async fn jetstream(server: &NatsServer) -> async_nats::jetstream::Context {
    exported_spans();
    let client = async_nats::connect(server.url()).await.unwrap();
    async_nats::jetstream::ContextBuilder::new()
        .timeout(Duration::from_millis(ACK_TIMEOUT_MS))
        .build(client)
}

/// The sink, with its stream created.
async fn sink_with_stream(server: &NatsServer) -> JetStreamSink {
    let jetstream = jetstream(server).await;
    let sink = JetStreamSink::new(jetstream.clone())
        .with_ack_timeout(Duration::from_millis(ACK_TIMEOUT_MS));
    jetstream
        .create_stream(sink.stream_config(STREAM))
        .await
        .unwrap();
    sink
}

fn drainer(store: &MemoryStore, receivers: Receivers<OutboxCategory>) -> Drainer<OutboxCategory> {
    Drainer::builder(store.clone(), receivers)
        .config(
            // Retries within tens of milliseconds: the tests wait on conditions,
            // not on a backoff of seconds.
            DrainConfig::default().backoff(BackoffPolicy::new(
                Duration::from_millis(10),
                Duration::from_millis(50),
            )),
        )
        .build()
}

fn both(sink: &JetStreamSink) -> Receivers<OutboxCategory> {
    Receivers::new()
        .on(OutboxCategory::PriceChanged, sink.receiver())
        .on(OutboxCategory::ProductUpdate, sink.receiver())
}

fn header<'a>(message: &'a async_nats::Message, name: &str) -> Option<&'a str> {
    message
        .headers
        .as_ref()
        .and_then(|headers| headers.get(name))
        .map(|value| value.as_str())
}

/// How long [`drain_until_empty`] tries: sixty acknowledgement timeouts,
/// for a server that was just started again (the client reconnects with a
/// growing delay) on a loaded machine.
const DRAIN_BOUND: Duration = Duration::from_millis(60 * ACK_TIMEOUT_MS);

/// Drains round after round until the outbox is empty; the last round's
/// report. Retries back off (up to 50 ms) in between: nothing to await.
/// Panics, with the rows left and the last report, after [`DRAIN_BOUND`].
async fn drain_until_empty(drainer: &Drainer<OutboxCategory>, store: &MemoryStore) -> DrainReport {
    let started = Instant::now();
    loop {
        let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
        let left = store.rows(OutboxKind::Region).len();
        if left == 0 {
            return report;
        }
        assert!(
            started.elapsed() < DRAIN_BOUND,
            "{left} rows left after {:.1?} (bound {DRAIN_BOUND:?}); the last round: {report:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await; // poll interval
    }
}

#[tokio::test]
async fn each_message_goes_to_its_shards_subject_with_its_id_and_headers() {
    each_message_goes_to_its_shards_subject_with_its_id_and_headers_through(both).await;
}

#[tokio::test]
async fn each_message_goes_to_its_shards_subject_with_its_id_and_headers_through_the_batch_receiver(
) {
    each_message_goes_to_its_shards_subject_with_its_id_and_headers_through(batched).await;
}

async fn each_message_goes_to_its_shards_subject_with_its_id_and_headers_through(
    receivers: fn(&JetStreamSink) -> Receivers<OutboxCategory>,
) {
    let server = NatsServer::start().unwrap();
    let sink = sink_with_stream(&server).await;
    let store = MemoryStore::new();
    let with_payload = store.write(
        &shop(42),
        OutboxCategory::PriceChanged,
        7,
        Some(json!({ "cents": 990 })),
    );
    let without_payload = store.write(&shop(-3), OutboxCategory::ProductUpdate, 8, None);
    let written = store.rows(OutboxKind::Region);

    drainer(&store, receivers(&sink))
        .drain_due(OutboxKind::Region)
        .await
        .unwrap();
    assert!(store.rows(OutboxKind::Region).is_empty());

    let messages = read_stream(sink.context(), STREAM, READ_WAIT)
        .await
        .unwrap();
    assert_eq!(messages.len(), 2);
    let first = messages
        .iter()
        .find(|m| header(m, ROW_ID_HEADER) == Some(&with_payload.to_string()))
        .unwrap();
    assert_eq!(first.subject.as_str(), "outbox.PriceChanged.region.42");
    assert_eq!(
        header(first, MESSAGE_ID_HEADER),
        Some(written[0].message_id.to_string().as_str())
    );
    assert_eq!(header(first, CATEGORY_HEADER), Some("PriceChanged"));
    assert_eq!(header(first, OBJECT_HEADER), Some("7"));
    assert_eq!(header(first, SHARD_HEADER), Some("region:0/42"));
    assert_eq!(header(first, COALESCED_HEADER), Some("1"));
    let added =
        chrono::DateTime::parse_from_rfc3339(header(first, DATE_ADDED_HEADER).unwrap()).unwrap();
    assert_eq!(
        added.timestamp_micros(),
        written[0].date_added.timestamp_micros()
    );
    // The context of the publish span (see the trace test below).
    let traceparent = header(first, TRACEPARENT_HEADER).unwrap();
    assert!(
        traceparent.parse::<outbox_core::TraceParent>().is_ok(),
        "{traceparent}"
    );
    assert_eq!(first.payload.as_ref(), br#"{"cents":990}"#);

    let second = messages
        .iter()
        .find(|m| header(m, ROW_ID_HEADER) == Some(&without_payload.to_string()))
        .unwrap();
    assert_eq!(second.subject.as_str(), "outbox.ProductUpdate.region.-3");
    assert!(second.payload.is_empty(), "no payload: an empty body");
}

#[tokio::test]
async fn control_outbox_subjects_carry_the_region_and_a_prefix_may_have_several_tokens() {
    control_outbox_subjects_carry_the_region_and_a_prefix_may_have_several_tokens_through(both)
        .await;
}

#[tokio::test]
async fn control_outbox_subjects_carry_the_region_and_a_prefix_may_have_several_tokens_through_the_batch_receiver(
) {
    control_outbox_subjects_carry_the_region_and_a_prefix_may_have_several_tokens_through(batched)
        .await;
}

async fn control_outbox_subjects_carry_the_region_and_a_prefix_may_have_several_tokens_through(
    receivers: fn(&JetStreamSink) -> Receivers<OutboxCategory>,
) {
    let server = NatsServer::start().unwrap();
    let jetstream = jetstream(&server).await;
    let sink = JetStreamSink::new(jetstream.clone())
        .with_prefix("acme.outbox")
        .unwrap();
    assert_eq!(sink.wildcard(), "acme.outbox.>");
    jetstream
        .create_stream(sink.stream_config(STREAM))
        .await
        .unwrap();
    let store = MemoryStore::new();
    let shard = ShardKey::control("us", OutboxScope::ShopScope, 9);
    store.write(&shard, OutboxCategory::PriceChanged, 1, Some(json!(1)));
    drainer(&store, receivers(&sink))
        .drain_due(OutboxKind::Control)
        .await
        .unwrap();
    let messages = read_stream(&jetstream, STREAM, READ_WAIT).await.unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(
        messages[0].subject.as_str(),
        "acme.outbox.PriceChanged.control.us.9"
    );
    assert_eq!(header(&messages[0], SHARD_HEADER), Some("control[us]:0/9"));

    for bad in ["", "acme..outbox", "acme.*", "out>box", "acme outbox"] {
        let error = JetStreamSink::new(jetstream.clone())
            .with_prefix(bad)
            .unwrap_err();
        assert_eq!(error.part, SubjectPart::Prefix, "{bad:?}");
    }
}

fn batched(sink: &JetStreamSink) -> Receivers<OutboxCategory> {
    Receivers::new()
        .on_batch(OutboxCategory::PriceChanged, sink.batch_receiver())
        .on_batch(OutboxCategory::ProductUpdate, sink.batch_receiver())
}

#[tokio::test]
async fn each_shard_arrives_in_order_and_whole() {
    each_shard_arrives_in_order_and_whole_through(both).await;
}

#[tokio::test]
async fn each_shard_arrives_in_order_and_whole_through_the_batch_receiver() {
    each_shard_arrives_in_order_and_whole_through(batched).await;
}

async fn each_shard_arrives_in_order_and_whole_through(
    receivers: fn(&JetStreamSink) -> Receivers<OutboxCategory>,
) {
    let server = NatsServer::start().unwrap();
    let sink = sink_with_stream(&server).await;
    let store = MemoryStore::new();
    let mut written = Vec::new();
    for n in 0..300i64 {
        let shard = n % 7;
        let sequence = n / 7;
        written.push(store.write(
            &shop(shard),
            OutboxCategory::PriceChanged,
            n,
            Some(json!({ "shard": shard, "sequence": sequence })),
        ));
    }
    let report = drain_until_empty(&drainer(&store, receivers(&sink)), &store).await;
    assert!(report.failures.is_empty(), "{:?}", report.failures);

    let messages = read_stream(sink.context(), STREAM, READ_WAIT)
        .await
        .unwrap();
    let mut next = [0i64; 7];
    for message in &messages {
        let body: serde_json::Value = serde_json::from_slice(&message.payload).unwrap();
        let shard = body["shard"].as_i64().unwrap();
        let sequence = body["sequence"].as_i64().unwrap();
        assert_eq!(
            message.subject.as_str(),
            format!("outbox.PriceChanged.region.{shard}")
        );
        assert_eq!(sequence, next[shard as usize], "shard {shard} out of order");
        next[shard as usize] += 1;
    }
    assert_eq!(messages.len(), written.len());
}

/// The batch receiver publishes the next message of many shards at once.
/// Shard 1's third message is too large for the stream, which refuses it
/// while it would store the fourth: that fourth is not published meanwhile
/// (the drain never has two messages of one shard out at once, so no later
/// message can be stored ahead of a refused one), while shards 2 and 3, in
/// the same batches, are stored whole. Once the operator raises the limit
/// and releases the quarantined shard, the rest of shard 1 follows: the
/// stream holds every message once, each shard in order.
#[tokio::test]
async fn a_publish_refused_in_the_middle_of_a_shard_holds_it_and_keeps_its_order() {
    let server = NatsServer::start().unwrap();
    let jetstream = jetstream(&server).await;
    let sink = JetStreamSink::new(jetstream.clone());
    let mut config = sink.stream_config(STREAM);
    config.max_message_size = 1_024;
    jetstream.create_stream(config.clone()).await.unwrap();
    let store = MemoryStore::new();
    for sequence in 0..4i64 {
        for shard in 1..=3i64 {
            let padding = if (shard, sequence) == (1, 2) {
                2_000
            } else {
                0
            };
            store.write(
                &shop(shard),
                OutboxCategory::PriceChanged,
                sequence,
                Some(
                    json!({ "shard": shard, "sequence": sequence, "padding": "x".repeat(padding) }),
                ),
            );
        }
    }
    let drainer = drainer(&store, batched(&sink));
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 2 + 4 + 4, "{report:?}");
    assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
    let failure = &report.failures[0];
    assert_eq!(failure.shard, shop(1));
    assert!(failure.error.is_permanent(), "{:?}", failure.error);
    assert!(
        failure.error.to_string().contains("too large"),
        "{}",
        failure.error
    );
    assert_eq!(
        store.rows(OutboxKind::Region).len(),
        2,
        "shard 1's last two stay"
    );
    let stored = read_stream(sink.context(), STREAM, READ_WAIT)
        .await
        .unwrap();
    assert_eq!(
        stored.len(),
        10,
        "nothing of shard 1 after the refused publish"
    );

    config.max_message_size = 1 << 20;
    jetstream.update_stream(config).await.unwrap();
    let released = store
        .retry_now(&[shop(1)], chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(released, vec![shop(1)]);
    let report = drain_until_empty(&drainer, &store).await;
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let messages = read_stream(sink.context(), STREAM, READ_WAIT)
        .await
        .unwrap();
    let mut seen: HashMap<i64, Vec<i64>> = HashMap::new();
    for message in &messages {
        let body: serde_json::Value = serde_json::from_slice(&message.payload).unwrap();
        seen.entry(body["shard"].as_i64().unwrap())
            .or_default()
            .push(body["sequence"].as_i64().unwrap());
    }
    for shard in 1..=3 {
        assert_eq!(seen[&shard], vec![0, 1, 2, 3], "shard {shard}");
    }
}

#[tokio::test]
async fn rows_stay_until_jetstream_acknowledges_and_nothing_is_lost_across_a_restart() {
    rows_stay_until_jetstream_acknowledges_and_nothing_is_lost_across_a_restart_through(both).await;
}

#[tokio::test]
async fn rows_stay_until_jetstream_acknowledges_and_nothing_is_lost_across_a_restart_through_the_batch_receiver(
) {
    rows_stay_until_jetstream_acknowledges_and_nothing_is_lost_across_a_restart_through(batched)
        .await;
}

async fn rows_stay_until_jetstream_acknowledges_and_nothing_is_lost_across_a_restart_through(
    receivers: fn(&JetStreamSink) -> Receivers<OutboxCategory>,
) {
    let mut server = NatsServer::start().unwrap();
    let sink = sink_with_stream(&server).await;
    let store = MemoryStore::new();
    for n in 0..20i64 {
        store.write(
            &shop(n % 4),
            OutboxCategory::PriceChanged,
            n,
            Some(json!({ "n": n })),
        );
    }
    let written: Vec<_> = store
        .rows(OutboxKind::Region)
        .into_iter()
        .map(|row| row.message_id.to_string())
        .collect();
    let drainer = drainer(&store, receivers(&sink));

    server.kill();
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(
        report.deliveries, 0,
        "nothing counts as delivered unacknowledged"
    );
    assert_eq!(
        report.failures.len(),
        4,
        "every shard failed its first message"
    );
    for failure in &report.failures {
        let DeliveryError::Handler(error) = &failure.error else {
            panic!("{:?}", failure.error);
        };
        let error = error.downcast_ref::<JetStreamError>().unwrap();
        assert!(
            matches!(
                error,
                JetStreamError::Timeout { .. } | JetStreamError::Publish { .. }
            ),
            "{error}"
        );
        assert!(!error.is_permanent());
        assert!(!outbox_core::is_permanent(error));
    }
    assert_eq!(store.rows(OutboxKind::Region).len(), 20, "every row stays");

    server.start_again().unwrap();
    let report = drain_until_empty(&drainer, &store).await;
    assert!(
        store.rows(OutboxKind::Region).is_empty(),
        "still pending after the restart: {:?}",
        report.failures
    );
    let messages = read_stream(sink.context(), STREAM, READ_WAIT)
        .await
        .unwrap();
    let ids: Vec<&str> = messages
        .iter()
        .map(|m| header(m, MESSAGE_ID_HEADER).unwrap())
        .collect();
    let unique: HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "no message twice");
    let expected: HashSet<&str> = written.iter().map(String::as_str).collect();
    assert_eq!(unique, expected, "every message, once");
}

#[tokio::test]
async fn a_message_published_again_is_dropped_by_the_duplicate_window() {
    let server = NatsServer::start().unwrap();
    let sink = sink_with_stream(&server).await;
    let store = MemoryStore::new();
    store.write(&shop(1), OutboxCategory::PriceChanged, 1, Some(json!(1)));
    store.write(&shop(1), OutboxCategory::PriceChanged, 2, Some(json!(2)));

    // Publishes, then fails the first delivery: what a crash between the
    // acknowledgement and the outbox delete looks like to the stream.
    let acks = Arc::new(Mutex::new(Vec::new()));
    let receivers = Receivers::new()
        .on(OutboxCategory::PriceChanged, {
            let (sink, acks) = (sink.clone(), acks.clone());
            move |message: Message<OutboxCategory>| {
                let (sink, acks) = (sink.clone(), acks.clone());
                async move {
                    let ack = sink.publish(&message).await?;
                    let mut acks = acks.lock().unwrap();
                    acks.push((message.object_identifier, ack.sequence, ack.duplicate));
                    if acks.len() == 1 {
                        return Err(HandlerError::from("crashed before the delete"));
                    }
                    Ok(())
                }
            }
        })
        .discard(OutboxCategory::ProductUpdate);
    let drainer = drainer(&store, receivers);
    drain_until_empty(&drainer, &store).await;
    assert!(store.rows(OutboxKind::Region).is_empty());

    assert_eq!(
        *acks.lock().unwrap(),
        vec![(1, 1, false), (1, 1, true), (2, 2, false)],
        "the second publish of object 1 is acknowledged as the first one's duplicate"
    );
    let messages = read_stream(sink.context(), STREAM, READ_WAIT)
        .await
        .unwrap();
    let objects: Vec<&str> = messages
        .iter()
        .map(|m| header(m, OBJECT_HEADER).unwrap())
        .collect();
    assert_eq!(objects, ["1", "2"], "stored once each, in order");
}

#[tokio::test]
async fn a_region_that_is_no_subject_token_quarantines_with_a_typed_error() {
    a_region_that_is_no_subject_token_quarantines_with_a_typed_error_through(both).await;
}

#[tokio::test]
async fn a_region_that_is_no_subject_token_quarantines_with_a_typed_error_through_the_batch_receiver(
) {
    a_region_that_is_no_subject_token_quarantines_with_a_typed_error_through(batched).await;
}

async fn a_region_that_is_no_subject_token_quarantines_with_a_typed_error_through(
    receivers: fn(&JetStreamSink) -> Receivers<OutboxCategory>,
) {
    let server = NatsServer::start().unwrap();
    let sink = sink_with_stream(&server).await;
    let store = MemoryStore::new();
    let shard = ShardKey::control("eu.west", OutboxScope::ShopScope, 5);
    store.write(&shard, OutboxCategory::PriceChanged, 1, None);
    let report = drainer(&store, receivers(&sink))
        .drain_due(OutboxKind::Control)
        .await
        .unwrap();
    assert_eq!(report.failures.len(), 1);
    let failure = &report.failures[0];
    let DeliveryError::Handler(error) = &failure.error else {
        panic!("{:?}", failure.error);
    };
    assert!(outbox_core::is_permanent(error.as_ref()), "{error}");
    assert_eq!(
        failure.retry_at,
        quarantined_until(),
        "quarantined, not retried"
    );
    let source = std::error::Error::source(error.as_ref()).unwrap();
    let Some(JetStreamError::InvalidSubject(InvalidSubject { part, value, .. })) =
        source.downcast_ref::<JetStreamError>()
    else {
        panic!("{source:?}");
    };
    assert_eq!((*part, value.as_str()), (SubjectPart::Region, "eu.west"));
    assert!(error.to_string().contains("rename the region"), "{error}");
    assert_eq!(store.rows(OutboxKind::Control).len(), 1, "the row stays");
}

#[tokio::test]
async fn no_stream_for_the_subject_is_a_transient_error_naming_it() {
    no_stream_for_the_subject_is_a_transient_error_naming_it_through(both).await;
}

#[tokio::test]
async fn no_stream_for_the_subject_is_a_transient_error_naming_it_through_the_batch_receiver() {
    no_stream_for_the_subject_is_a_transient_error_naming_it_through(batched).await;
}

async fn no_stream_for_the_subject_is_a_transient_error_naming_it_through(
    receivers: fn(&JetStreamSink) -> Receivers<OutboxCategory>,
) {
    let server = NatsServer::start().unwrap();
    let jetstream = jetstream(&server).await;
    let sink = JetStreamSink::new(jetstream.clone());
    let store = MemoryStore::new();
    store.write(&shop(3), OutboxCategory::PriceChanged, 1, None);
    let drainer = drainer(&store, receivers(&sink));

    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    let DeliveryError::Handler(error) = &report.failures[0].error else {
        panic!("{:?}", report.failures);
    };
    let error = error.downcast_ref::<JetStreamError>().unwrap();
    assert!(matches!(error, JetStreamError::NoStream { .. }), "{error}");
    assert!(!error.is_permanent());
    assert!(
        error.to_string().contains("outbox.PriceChanged.region.3"),
        "{error}"
    );

    // The stream appears (a deploy that created it late): the retry succeeds.
    jetstream
        .create_stream(sink.stream_config(STREAM))
        .await
        .unwrap();
    drain_until_empty(&drainer, &store).await;
    assert!(store.rows(OutboxKind::Region).is_empty());
    assert_eq!(
        read_stream(&jetstream, STREAM, READ_WAIT)
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn the_traceparent_header_continues_the_writers_trace() {
    the_traceparent_header_continues_the_writers_trace_through(both).await;
}

#[tokio::test]
async fn the_traceparent_header_continues_the_writers_trace_through_the_batch_receiver() {
    the_traceparent_header_continues_the_writers_trace_through(batched).await;
}

async fn the_traceparent_header_continues_the_writers_trace_through(
    receivers: fn(&JetStreamSink) -> Receivers<OutboxCategory>,
) {
    use outbox_core::TraceParent;

    let exporter = exported_spans();
    let server = NatsServer::start().unwrap();
    let sink = sink_with_stream(&server).await;
    let store = MemoryStore::new();
    let written = tracing::info_span!("request").in_scope(|| {
        store.write(&shop(1), OutboxCategory::PriceChanged, 1, None);
        TraceParent::current().unwrap()
    });
    drainer(&store, receivers(&sink))
        .drain_due(OutboxKind::Region)
        .await
        .unwrap();
    let messages = read_stream(sink.context(), STREAM, READ_WAIT)
        .await
        .unwrap();
    let sent: TraceParent = header(&messages[0], TRACEPARENT_HEADER)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(sent.trace_id(), written.trace_id(), "the writer's trace");

    let spans = exporter.get_finished_spans().unwrap();
    let ours = |name: &str| {
        spans
            .iter()
            .find(|span| span.name == name && span.span_context.trace_id() == written.trace_id())
            .unwrap_or_else(|| panic!("no span {name} in the writer's trace"))
            .clone()
    };
    let (publish, deliver) = (ours("outbox.jetstream.publish"), ours("outbox.deliver"));
    assert_eq!(
        sent.span_id(),
        publish.span_context.span_id(),
        "the publish span's context"
    );
    assert_eq!(
        publish.parent_span_id,
        deliver.span_context.span_id(),
        "the publish runs in the delivery span"
    );
}
