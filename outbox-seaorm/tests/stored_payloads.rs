//! Payloads as the stores read them: the stored JSON's text reaches the
//! receiver (PostgreSQL prints `jsonb` its own way) and equals what was
//! written; on SQLite, whose `json` column is text, a payload written by
//! hand that is not JSON fails its own shard's delivery with a typed error,
//! and every other shard is delivered.

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};

use outbox_core::store::StoreAdmin;
use outbox_core::{Drainer, HandlerError, Message, OutboxKind, Receivers};
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId};
use outbox_testing::conformance::OutboxCategory;
use outbox_testing::database::{DbBackend, TestDatabase};
use sea_orm::{ConnectionTrait, Statement};
use serde_json::{json, Value};

/// What the receiver saw: each delivered object's payload text and parsed
/// value, or the decoding error's text.
type Seen = Arc<Mutex<Vec<(i64, Result<(String, Value), String>)>>>;

fn receivers(seen: &Seen) -> Receivers<OutboxCategory> {
    let seen = seen.clone();
    Receivers::new().on(
        OutboxCategory::AuditLogEvent,
        move |message: Message<OutboxCategory>| {
            let seen = seen.clone();
            async move {
                let text = message.payload.as_ref().unwrap().as_str().to_owned();
                let parsed = message.payload_as::<Value>();
                let outcome = match &parsed {
                    Ok(value) => Ok((text, value.clone())),
                    Err(error) => Err(error.to_string()),
                };
                seen.lock()
                    .unwrap()
                    .push((message.object_identifier, outcome));
                parsed.map(|_| ()).map_err(HandlerError::from)
            }
        },
    )
}

async fn write(t: &TestDatabase, object: i64, payload: Value) -> i64 {
    let message = OutboxMessage::new(
        OutboxCategory::AuditLogEvent,
        ShardId(object),
        ObjectId(object),
    )
    .with_payload(payload);
    write_region(&t.db, message).await.unwrap().id
}

/// The stored text reaches the receiver, parses to what was written, and
/// compares equal to it whatever its spacing.
async fn the_stored_text_reaches_the_receiver_and_parses_to_what_was_written(backend: DbBackend) {
    let t = TestDatabase::of(backend, "stored_payloads").await.unwrap();
    let written = json!({ "name": "acme", "seats": [1, 2.5, null], "nested": { "ok": true } });
    write(&t, 1, written.clone()).await;
    let seen: Seen = Arc::default();
    let drainer = Drainer::new(t.store(), receivers(&seen));
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 1);
    let seen = seen.lock().unwrap().clone();
    let (object, Ok((text, parsed))) = &seen[0] else {
        panic!("not delivered as JSON: {seen:?}");
    };
    assert_eq!((*object, parsed), (1, &written));
    assert_eq!(
        outbox_core::Payload::from_json(text.clone()).unwrap(),
        written
    );
    if backend == DbBackend::Postgres {
        // jsonb's own printing, not serde_json's: the text is the store's.
        assert!(text.contains("\": "), "{text}");
    }
}

/// SQLite only: a payload that is not JSON (written by hand) fails the
/// delivery of its shard with `PayloadError::Malformed`, the rows stay, and
/// the other shards are delivered.
async fn a_payload_that_is_not_json_fails_its_shard_alone() {
    let t = TestDatabase::of(DbBackend::Sqlite, "stored_payloads")
        .await
        .unwrap();
    let bad = write(&t, 1, json!({ "v": 1 })).await;
    write(&t, 2, json!({ "v": 2 })).await;
    t.db.execute_raw(Statement::from_sql_and_values(
        DbBackend::Sqlite,
        "UPDATE region_outbox SET payload = $1 WHERE id = $2",
        ["{not json".into(), bad.into()],
    ))
    .await
    .unwrap();
    let seen: Seen = Arc::default();
    let drainer = Drainer::new(t.store(), receivers(&seen));
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(report.deliveries, 1, "{seen:?}");
    assert!(
        seen.iter()
            .any(|(object, outcome)| *object == 2 && outcome.is_ok()),
        "{seen:?}"
    );
    let failed: Vec<_> = seen.iter().filter(|(object, _)| *object == 1).collect();
    assert_eq!(failed.len(), 1, "{seen:?}");
    let Err(error) = &failed[0].1 else {
        panic!("{seen:?}")
    };
    assert!(
        error.contains("not a `serde_json::value::Value`"),
        "{error}"
    );
    assert_eq!(
        t.store().pending_count(OutboxKind::Region).await.unwrap(),
        1
    );
}

#[tokio::test]
async fn postgres_the_stored_text_reaches_the_receiver_and_parses_to_what_was_written() {
    the_stored_text_reaches_the_receiver_and_parses_to_what_was_written(DbBackend::Postgres).await;
}

#[tokio::test]
async fn sqlite_the_stored_text_reaches_the_receiver_and_parses_to_what_was_written() {
    the_stored_text_reaches_the_receiver_and_parses_to_what_was_written(DbBackend::Sqlite).await;
}

#[tokio::test]
async fn sqlite_a_payload_that_is_not_json_fails_its_shard_alone() {
    a_payload_that_is_not_json_fails_its_shard_alone().await;
}
