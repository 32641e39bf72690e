//! The write API under hostile payloads, on PostgreSQL and SQLite: a
//! payload either round-trips exactly through the outbox or is refused with
//! a typed error, and a refused write leaves nothing behind.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::HashMap;

use outbox_core::store::StoreAdmin;
use outbox_core::{Drainer, OutboxKind};
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId, WriteError};
use outbox_testing::database::TestDatabase;
use outbox_testing::{drain_until_idle, Recorder};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use sea_orm::DbBackend;
use serde_json::Value;

outbox_core::registry! {
    OrgScope = 0 {
        OrgUpdate = 1,
        OrgRetired = 2 (retired),
    }
}

fn payload() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        ".{0,30}".prop_map(Value::from),
        Just(Value::from("nul\0inside")),
        (0usize..3_000).prop_map(|n| Value::from("ß".repeat(n))),
        any::<i64>().prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        any::<bool>().prop_map(Value::from),
        Just(Value::Null),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(".{0,8}", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

async fn hostile_payloads_round_trip_or_are_refused_with_nothing_left(backend: DbBackend) {
    let db = TestDatabase::of(backend, "write_hostile").await.unwrap();
    let recorder = Recorder::<OutboxCategory>::new();
    let drainer = Drainer::new(db.store(), recorder.receivers());
    let mut runner = TestRunner::deterministic();
    let (mut written, mut refused) = (Vec::new(), 0);
    for object in 0..60 {
        let payload = payload().new_tree(&mut runner).unwrap().current();
        let txn = outbox_seaorm::begin_write(&db.db).await.unwrap();
        let message = OutboxMessage::new(OutboxCategory::OrgUpdate, ShardId(1), ObjectId(object))
            .with_payload(payload.clone());
        match write_region(&txn, message).await {
            Ok(_) => {
                txn.commit().await.unwrap();
                written.push((object, payload));
            }
            // PostgreSQL's jsonb cannot store NUL characters: refused
            // before any statement, the transaction still usable.
            Err(WriteError::NulInPayload { .. }) if backend == DbBackend::Postgres => {
                txn.commit().await.unwrap();
                refused += 1;
            }
            Err(other) => panic!("unexpected error for {payload}: {other}"),
        }
    }
    drain_until_idle(&drainer, &[OutboxKind::Region])
        .await
        .unwrap();
    let delivered: HashMap<i64, Option<Value>> = recorder
        .deliveries()
        .into_iter()
        .map(|d| (d.object, d.payload))
        .collect();
    assert_eq!(
        delivered.len(),
        written.len(),
        "only what was written, all of it"
    );
    for (object, payload) in written {
        let got = delivered[&object].as_ref().unwrap();
        // Floats may come back rounded to 15 significant digits.
        assert!(
            got == &payload || same_numbers(got, &payload),
            "{payload} came back as {got}"
        );
    }
    if backend == DbBackend::Postgres {
        assert!(refused > 0, "some payloads carried NUL characters");
    }
    assert_eq!(
        db.store().pending_count(OutboxKind::Region).await.unwrap(),
        0
    );
}

fn same_numbers(a: &Value, b: &Value) -> bool {
    match (a, b) {
        // Both databases keep floats to 15 significant digits (SQLite's
        // JSON functions print them so; PostgreSQL's driver reads them so).
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y || ((x - y) / x).abs() < 1e-14,
            _ => false,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| x == y || same_numbers(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| v == w || same_numbers(v, w)))
        }
        _ => a == b,
    }
}

/// Payloads that do not serialize, and retired categories, are typed errors
/// before anything reaches the database.
async fn unserializable_payloads_and_retired_categories_are_typed_errors(backend: DbBackend) {
    let db = TestDatabase::of(backend, "write_typed").await.unwrap();
    let txn = outbox_seaorm::begin_write(&db.db).await.unwrap();
    let not_json: HashMap<(i32, i32), i32> = HashMap::from([((1, 2), 3)]);
    let error = OutboxMessage::new(OutboxCategory::OrgUpdate, ShardId(1), ObjectId(1))
        .with_payload_of(&not_json)
        .unwrap_err();
    assert!(
        matches!(
            error,
            WriteError::Payload {
                category: "OrgUpdate",
                ..
            }
        ),
        "{error}"
    );
    let error = write_region(
        &txn,
        OutboxMessage::new(OutboxCategory::OrgRetired, ShardId(1), ObjectId(1)),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(error, WriteError::RetiredCategory { .. }),
        "{error}"
    );
    txn.commit().await.unwrap();
    assert_eq!(
        db.store().pending_count(OutboxKind::Region).await.unwrap(),
        0
    );
}

outbox_testing::on_both_backends!(
    hostile_payloads_round_trip_or_are_refused_with_nothing_left,
    unserializable_payloads_and_retired_categories_are_typed_errors,
);
