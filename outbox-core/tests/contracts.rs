//! Message contracts across a rolling deploy, over `MemoryStore`: a
//! producer ahead of its receiver parks the shards it wrote newer versions
//! in, loses nothing, delivers nothing to the wrong type, and the shards
//! deliver once the receiver that knows the version drains them.

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use outbox_core::store::StoreAdmin;
use outbox_core::Clock;
use outbox_core::{
    DrainConfig, Drainer, HandlerError, ManualClock, MemoryStore, Message, OutboxKind,
    PayloadError, Receivers, ShardKey, ShardStatus,
};
use serde_json::json;

use outbox_testing::contracts::{OrgV2, OrgV3};

/// Last week's build: its registry says `OrgUpdate` carries an `OrgV2`.
mod last_week {
    outbox_core::registry! {
        OrgScope = 0 (shard_field = "organization_id") {
            OrgUpdate = 1 (payload = super::OrgV2),
            OrgPing = 2,
        }
    }
}

/// Next week's build, deployed first on the producing silo.
mod next_week {
    outbox_core::registry! {
        OrgScope = 0 (shard_field = "organization_id") {
            OrgUpdate = 1 (payload = super::OrgV3),
            OrgPing = 2,
        }
    }
}

const PARK: Duration = Duration::from_secs(30);

fn shard(id: i64) -> ShardKey {
    ShardKey::region(last_week::OutboxScope::OrgScope, id)
}

type Seen<T> = Arc<Mutex<Vec<(i64, T)>>>;

fn last_week_receivers(seen: &Seen<OrgV2>) -> Receivers<last_week::OutboxCategory> {
    let seen = seen.clone();
    Receivers::new()
        .on_typed(
            last_week::outbox_categories::OrgUpdate,
            move |message: Message<last_week::OutboxCategory>, org: OrgV2| {
                seen.lock().unwrap().push((message.object_identifier, org));
                async { Ok::<_, HandlerError>(()) }
            },
        )
        .discard(last_week::OutboxCategory::OrgPing)
}

fn next_week_receivers(seen: &Seen<OrgV3>) -> Receivers<next_week::OutboxCategory> {
    let seen = seen.clone();
    Receivers::new()
        .on_typed(
            next_week::outbox_categories::OrgUpdate,
            move |message: Message<next_week::OutboxCategory>, org: OrgV3| {
                seen.lock().unwrap().push((message.object_identifier, org));
                async { Ok::<_, HandlerError>(()) }
            },
        )
        .discard(next_week::OutboxCategory::OrgPing)
}

fn config() -> DrainConfig {
    DrainConfig::default().park_interval(PARK)
}

#[tokio::test]
async fn a_producer_ahead_of_its_receiver_parks_the_shard_until_the_upgrade() {
    let clock = ManualClock::new(chrono::Utc::now());
    let store = MemoryStore::new().with_clock(clock.clone());
    // Shard 1: a row from before the category was typed (no version).
    store.write_versioned(&shard(1), 1, 10, Some(json!({ "name": "legacy" })), None);
    // Shard 2: last week's producer.
    store
        .write_typed(
            &shard(2),
            last_week::outbox_categories::OrgUpdate,
            20,
            &OrgV2 {
                name: "current".into(),
                seats: 5,
            },
        )
        .unwrap();
    // Shard 3: next week's producer, then last week's writing the same shard.
    store
        .write_typed(
            &shard(3),
            next_week::outbox_categories::OrgUpdate,
            30,
            &OrgV3 {
                display_name: "ahead".into(),
                seats: 7,
            },
        )
        .unwrap();
    store
        .write_typed(
            &shard(3),
            last_week::outbox_categories::OrgUpdate,
            31,
            &OrgV2 {
                name: "behind".into(),
                seats: 2,
            },
        )
        .unwrap();

    // Last week's receiver drains, in a scope that dead-letters at the first
    // failure: the parked shard must not be dead-lettered.
    let old_seen: Seen<OrgV2> = Arc::default();
    let old = Drainer::builder(store.clone(), last_week_receivers(&old_seen))
        .config(config())
        .clock(clock.clone())
        .dead_letter(last_week::OutboxScope::OrgScope, 1)
        .build();
    let report = old.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(
        // Different shards: delivered concurrently, in no order.
        sorted(&old_seen),
        vec![
            (
                10,
                OrgV2 {
                    name: "legacy".into(),
                    seats: 1
                }
            ),
            (
                20,
                OrgV2 {
                    name: "current".into(),
                    seats: 5
                }
            ),
        ],
        "the unversioned row is read as version 1 and upcast; shard 3 is not delivered"
    );
    assert_eq!(report.failures.len(), 1);
    let failure = &report.failures[0];
    assert_eq!(failure.shard, shard(3));
    assert!(!failure.dead_lettered);
    let unknown = failure.error.unknown_version().expect("an unknown version");
    assert_eq!(
        (unknown.category, unknown.version, unknown.known.clone()),
        ("OrgUpdate", 3, vec![1, 2])
    );
    assert_eq!(failure.error.reason(), "unknown_version");
    assert!(
        failure.error.to_string().contains("deploy the receiver"),
        "{}",
        failure.error
    );
    let parked_at = clock.now();
    let failing = store.failing_shards(OutboxKind::Region, 10).await.unwrap();
    assert_eq!(failing.len(), 1);
    let state = &failing[0].state;
    assert_eq!(state.status(), ShardStatus::Parked);
    assert_eq!(state.attempts, 0, "parking counts no attempt");
    assert_eq!(
        state.next_attempt(),
        Some(parked_at + chrono::Duration::from_std(PARK).unwrap())
    );
    assert_eq!(store.rows(OutboxKind::Region).len(), 2, "nothing is lost");
    assert_eq!(
        store.dead_letter_count(OutboxKind::Region).await.unwrap(),
        0
    );

    // Tried again after the park interval by the same build: parked again,
    // for the same interval (no backoff growth), still no attempt counted.
    clock.advance(PARK + Duration::from_secs(1));
    let report = old.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 0);
    let failing = store.failing_shards(OutboxKind::Region, 10).await.unwrap();
    assert_eq!(failing[0].state.status(), ShardStatus::Parked);
    assert_eq!(failing[0].state.attempts, 0);
    assert_eq!(
        failing[0].state.next_attempt(),
        Some(clock.now() + chrono::Duration::from_std(PARK).unwrap())
    );
    assert_eq!(old_seen.lock().unwrap().len(), 2, "never the wrong type");

    // The upgrade: next week's receiver takes the shard at its next attempt
    // and delivers both rows in order, the older one upcast.
    clock.advance(PARK + Duration::from_secs(1));
    let new_seen: Seen<OrgV3> = Arc::default();
    let new = Drainer::builder(store.clone(), next_week_receivers(&new_seen))
        .config(config())
        .clock(clock.clone())
        .build();
    let report = new.drain_due(OutboxKind::Region).await.unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(
        *new_seen.lock().unwrap(),
        vec![
            (
                30,
                OrgV3 {
                    display_name: "ahead".into(),
                    seats: 7
                }
            ),
            (
                31,
                OrgV3 {
                    display_name: "behind".into(),
                    seats: 2
                }
            ),
        ]
    );
    assert!(store.rows(OutboxKind::Region).is_empty());
    assert!(store
        .failing_shards(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_payload_that_does_not_match_its_version_backs_off_like_a_failure() {
    let store = MemoryStore::new();
    // Says version 2, holds something else.
    store.write_versioned(&shard(1), 1, 10, Some(json!({ "seats": "many" })), Some(2));
    // A typed category without a payload.
    store.write_versioned(&shard(2), 1, 20, None, Some(2));
    let seen: Seen<OrgV2> = Arc::default();
    let drainer = Drainer::new(store.clone(), last_week_receivers(&seen));
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert!(seen.lock().unwrap().is_empty());
    assert_eq!(report.failures.len(), 2);
    for failure in &report.failures {
        assert!(failure.error.unknown_version().is_none());
        assert_eq!(failure.error.reason(), "handler");
        let outbox_core::DeliveryError::Handler(error) = &failure.error else {
            panic!("a handler error: {:?}", failure.error);
        };
        let payload = error
            .downcast_ref::<PayloadError>()
            .expect("a payload error");
        match (failure.shard.identifier(), payload) {
            (1, PayloadError::Malformed { expected, .. }) => {
                assert!(expected.ends_with("OrgV2"), "{expected}");
            }
            (2, PayloadError::Missing { .. }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    let failing = store.failing_shards(OutboxKind::Region, 10).await.unwrap();
    assert_eq!(failing.len(), 2);
    for failing in failing {
        assert_eq!(failing.state.status(), ShardStatus::BackingOff);
        assert_eq!(failing.state.attempts, 1);
    }
}

#[test]
fn parking_is_counted_with_the_category_and_version() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let store = MemoryStore::new();
            store
                .write_typed(
                    &shard(3),
                    next_week::outbox_categories::OrgUpdate,
                    30,
                    &OrgV3 {
                        display_name: "ahead".into(),
                        seats: 7,
                    },
                )
                .unwrap();
            let seen: Seen<OrgV2> = Arc::default();
            let drainer = Drainer::new(store, last_week_receivers(&seen));
            drainer.drain_due(OutboxKind::Region).await.unwrap();
        });
    });
    let parked: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, _, _, _)| key.key().name() == outbox_core::metrics::PARKED)
        .collect();
    assert_eq!(parked.len(), 1);
    let (key, _, _, value) = &parked[0];
    let mut labels: Vec<(String, String)> = key
        .key()
        .labels()
        .map(|l| (l.key().to_owned(), l.value().to_owned()))
        .collect();
    labels.sort();
    assert_eq!(
        labels,
        vec![
            ("category".to_owned(), "OrgUpdate".to_owned()),
            ("kind".to_owned(), "region".to_owned()),
            ("version".to_owned(), "3".to_owned()),
        ]
    );
    assert_eq!(*value, DebugValue::Counter(1));
    // Not counted as a failed delivery.
    assert!(!snapshotter
        .snapshot()
        .into_vec()
        .iter()
        .any(|(key, _, _, _)| { key.key().name() == outbox_core::metrics::DELIVERY_FAILED }));
}

#[test]
fn the_registry_knows_each_typed_categorys_version() {
    use outbox_core::Category;
    assert_eq!(
        last_week::OutboxCategory::OrgUpdate.payload_version(),
        Some(2)
    );
    assert_eq!(
        next_week::OutboxCategory::OrgUpdate.payload_version(),
        Some(3)
    );
    assert_eq!(last_week::OutboxCategory::OrgPing.payload_version(), None);
    assert!(next_week::OutboxCategory::OrgUpdate
        .payload_type()
        .unwrap()
        .ends_with("OrgV3"));
    assert_eq!(
        outbox_core::contract::known_versions::<OrgV3>(),
        vec![1, 2, 3]
    );
    let receivers = next_week_receivers(&Arc::default());
    assert_eq!(
        receivers.accepted_versions(next_week::OutboxCategory::OrgUpdate),
        Some(&[1, 2, 3][..])
    );
    assert_eq!(
        receivers.accepted_versions(next_week::OutboxCategory::OrgPing),
        None
    );
}

/// What `seen` recorded, by object: for deliveries of different shards.
fn sorted<T: Clone>(seen: &Seen<T>) -> Vec<(i64, T)> {
    let mut seen = seen.lock().unwrap().clone();
    seen.sort_by_key(|(object, _)| *object);
    seen
}
