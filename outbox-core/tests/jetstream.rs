//! The JetStream sink against a real `nats-server` (started by the test):
//! subjects and headers, the acknowledgement awaited before the rows go,
//! duplicates dropped by message id, and subjects that cannot be built.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use async_nats::jetstream;
use outbox_core::conformance::{OutboxCategory, OutboxScope};
use outbox_core::sink::jetstream::{JetStreamSink, CATEGORY_HEADER, OBJECT_HEADER, ROW_ID_HEADER};
use outbox_core::testing::nats::{read_stream, NatsServer};
use outbox_core::{Drainer, MemoryStore, Message, OutboxKind, Receivers, ShardKey, StoreAdmin};
use serde_json::json;

async fn stream(server: &NatsServer) -> jetstream::Context {
    let client = async_nats::connect(server.url()).await.unwrap();
    let context = jetstream::ContextBuilder::new()
        .ack_timeout(Duration::from_secs(2))
        .build(client);
    context
        .get_or_create_stream(jetstream::stream::Config {
            name: "OUTBOX".into(),
            subjects: vec!["outbox.>".into()],
            storage: jetstream::stream::StorageType::File,
            duplicate_window: Duration::from_secs(600),
            ..Default::default()
        })
        .await
        .unwrap();
    context
}

fn receivers(sink: &JetStreamSink) -> Receivers<OutboxCategory> {
    Receivers::new()
        .on(OutboxCategory::OrganizationUpdate, sink.receiver())
        .on(OutboxCategory::OrganizationMemberUpdate, sink.receiver())
        .on(OutboxCategory::OrganizationWebhook, sink.receiver())
        .on(OutboxCategory::AuditLogEvent, sink.receiver())
}

fn header(message: &jetstream::message::StreamMessage, name: &str) -> String {
    message.headers.get(name).unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_reach_their_shards_subject_with_their_id_once() {
    let server = NatsServer::start().await.unwrap();
    let context = stream(&server).await;
    let sink = JetStreamSink::new(context.clone(), "outbox").unwrap();
    let store = MemoryStore::new();
    let region = ShardKey::region(OutboxScope::OrganizationScope, 7);
    let control = ShardKey::control("us", OutboxScope::OrganizationScope, 8);
    store.write(
        &region,
        OutboxCategory::OrganizationUpdate,
        70,
        Some(json!({ "name": "A" })),
    );
    store.write(&region, OutboxCategory::OrganizationUpdate, 71, None);
    store.write(&control, OutboxCategory::OrganizationUpdate, 80, None);
    let rows = store.rows(OutboxKind::Region);
    let drainer = Drainer::new(store.clone(), receivers(&sink));
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    drainer.drain_due(OutboxKind::Control).await.unwrap();
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);

    let messages = read_stream(&context, "OUTBOX").await.unwrap();
    let seen: Vec<(String, String, String, String)> = messages
        .iter()
        .map(|m| {
            (
                m.subject.to_string(),
                header(m, "Nats-Msg-Id"),
                header(m, OBJECT_HEADER),
                String::from_utf8(m.payload.to_vec()).unwrap(),
            )
        })
        .collect();
    assert_eq!(seen[0].0, "outbox.region.OrganizationScope.7");
    assert_eq!(seen[0].1, rows[0].message_id.to_string());
    assert_eq!(
        (seen[0].2.as_str(), seen[0].3.as_str()),
        ("70", r#"{"name":"A"}"#)
    );
    assert_eq!(seen[1].1, rows[1].message_id.to_string());
    assert_eq!((seen[1].2.as_str(), seen[1].3.as_str()), ("71", ""));
    assert_eq!(seen[2].0, "outbox.control.us.OrganizationScope.8");
    assert_eq!(header(&messages[0], CATEGORY_HEADER), "OrganizationUpdate");
    assert_eq!(header(&messages[0], ROW_ID_HEADER), rows[0].id.to_string());

    // Published again (a redelivery after a crash before the delete):
    // acknowledged as a duplicate, not stored twice.
    let again = store.write(&region, OutboxCategory::OrganizationUpdate, 72, None);
    let message_id = store.rows(OutboxKind::Region)[0].message_id;
    let first: std::sync::Arc<std::sync::Mutex<Option<Message<OutboxCategory>>>> =
        Default::default();
    let keep = first.clone();
    let capture = Receivers::new().on(
        OutboxCategory::OrganizationUpdate,
        move |message: Message<OutboxCategory>| {
            *keep.lock().unwrap() = Some(message);
            async { Ok::<_, outbox_core::HandlerError>(()) }
        },
    );
    Drainer::new(store.clone(), capture)
        .drain_shard(&region, Some(again))
        .await
        .unwrap();
    let message = first.lock().unwrap().take().unwrap();
    assert_eq!(message.message_id, message_id);
    assert!(!sink.publish(&message).await.unwrap().duplicate);
    assert!(sink.publish(&message).await.unwrap().duplicate);
    assert_eq!(read_stream(&context, "OUTBOX").await.unwrap().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_deleted_until_jetstream_stores_it() {
    let mut server = NatsServer::start().await.unwrap();
    let context = stream(&server).await;
    let sink = JetStreamSink::new(context.clone(), "outbox").unwrap();
    let store = MemoryStore::new();
    let shard = ShardKey::region(OutboxScope::OrganizationScope, 1);
    store.write(
        &shard,
        OutboxCategory::OrganizationWebhook,
        1,
        Some(json!(1)),
    );
    let drainer = Drainer::new(store.clone(), receivers(&sink));

    server.kill().await.unwrap();
    let error = drainer.drain_shard(&shard, None).await.unwrap_err();
    assert!(
        error.to_string().contains("not stored by JetStream"),
        "{error}"
    );
    assert_eq!(
        store.pending_count(OutboxKind::Region).await.unwrap(),
        1,
        "kept"
    );

    server.restart().await.unwrap();
    drainer
        .retry_now(std::slice::from_ref(&shard))
        .await
        .unwrap();
    // The client reconnects on its own; until then the shard backs off.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while store.pending_count(OutboxKind::Region).await.unwrap() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never delivered after the restart"
        );
        if drainer.drain_shard(&shard, None).await.is_err() {
            drainer
                .retry_now(std::slice::from_ref(&shard))
                .await
                .unwrap();
        }
    }
    let messages = read_stream(&context, "OUTBOX").await.unwrap();
    assert_eq!(messages.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_that_is_not_a_subject_token_quarantines_its_shard() {
    let server = NatsServer::start().await.unwrap();
    let context = stream(&server).await;
    assert!(JetStreamSink::new(context.clone(), "out.box").is_err());
    let sink = JetStreamSink::new(context.clone(), "outbox").unwrap();
    let store = MemoryStore::new();
    let shard = ShardKey::control("us.east", OutboxScope::OrganizationScope, 1);
    store.write(&shard, OutboxCategory::OrganizationUpdate, 1, None);
    let drainer = Drainer::new(store.clone(), receivers(&sink));
    let error = drainer.drain_shard(&shard, None).await.unwrap_err();
    assert!(
        error.to_string().contains("cannot be a NATS subject token"),
        "{error}"
    );
    let failing = store.failing_shards(OutboxKind::Control, 10).await.unwrap();
    assert!(failing[0].state.is_quarantined(), "{failing:?}");
    assert!(read_stream(&context, "OUTBOX").await.unwrap().is_empty());
}
