//! Property tests over the in-memory store: random interleavings of writes,
//! drains, receiver failures, crashed workers (and the early release of their
//! claims), store outages and clock jumps keep rules 2–6 (numbered as in `outbox_testing::conformance`).

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::FutureExt;
use outbox_core::store::StoreAdmin;
use outbox_core::{
    BackoffPolicy, Category, DrainConfig, Drainer, HandlerError, ManualClock, MemoryStore, Message,
    OutboxKind, Receivers, ShardKey,
};
use proptest::prelude::*;
use serde_json::json;

outbox_core::registry! {
    OrgScope = 0 {
        OrgUpdate = 1,
        OrgMemberUpdate = 2,
    }
}

#[derive(Clone, Debug)]
enum Op {
    Write {
        shard: i64,
        category: bool,
        object: i64,
    },
    Drain,
    FailNextDelivery,
    CrashDuringDelivery,
    /// Ends the claims of crashed rounds at once (`release_abandoned`).
    ReleaseAbandoned,
    StoreOutage,
    SyncFlush {
        shard: i64,
    },
    Advance {
        millis: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3i64, any::<bool>(), 0..3i64).prop_map(|(shard, category, object)| Op::Write { shard, category, object }),
        4 => Just(Op::Drain),
        1 => Just(Op::FailNextDelivery),
        1 => Just(Op::CrashDuringDelivery),
        1 => Just(Op::ReleaseAbandoned),
        1 => Just(Op::StoreOutage),
        1 => (0..3i64).prop_map(|shard| Op::SyncFlush { shard }),
        2 => (0..40_000u64).prop_map(|millis| Op::Advance { millis }),
    ]
}

#[derive(Clone, Debug)]
struct Seen {
    shard: ShardKey,
    group: (i32, i64),
    id: i64,
    first_id: i64,
    payload: Option<serde_json::Value>,
    epoch: u64,
    synchronous: bool,
}

#[derive(Clone, Default)]
struct Harness {
    seen: Arc<Mutex<Vec<Seen>>>,
    fail_next: Arc<AtomicBool>,
    hang_next: Arc<AtomicBool>,
    epoch: Arc<AtomicU64>,
}

impl Harness {
    fn receivers(&self) -> Receivers<OutboxCategory> {
        let mut receivers = Receivers::new();
        for &category in OutboxCategory::ALL {
            let harness = self.clone();
            receivers.register(category, move |message: Message<OutboxCategory>| {
                let harness = harness.clone();
                async move {
                    if harness.hang_next.swap(false, Ordering::SeqCst) {
                        harness.epoch.fetch_add(1, Ordering::SeqCst);
                        std::future::pending::<()>().await;
                    }
                    if harness.fail_next.swap(false, Ordering::SeqCst) {
                        harness.epoch.fetch_add(1, Ordering::SeqCst);
                        return Err::<(), HandlerError>("scripted failure".into());
                    }
                    harness.seen.lock().unwrap().push(Seen {
                        shard: message.shard.clone(),
                        group: (message.category.value(), message.object_identifier),
                        id: message.id,
                        first_id: message.first_id,
                        payload: message
                            .payload
                            .as_ref()
                            .map(outbox_core::Payload::to_value_or_text),
                        epoch: harness.epoch.load(Ordering::SeqCst),
                        synchronous: message.synchronous,
                    });
                    Ok(())
                }
            });
        }
        receivers
    }
}

fn shard(identifier: i64) -> ShardKey {
    ShardKey::region(OutboxScope::OrgScope, identifier)
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let clock = ManualClock::starting_now();
        let store = MemoryStore::new().with_clock(clock.clone());
        let harness = Harness::default();
        let config = DrainConfig::default()
            .batch_size(2)
            .lease(Duration::from_secs(30))
            .backoff(BackoffPolicy::new(
                Duration::from_secs(1),
                Duration::from_secs(60),
            ));
        let drainer = Drainer::builder(store.clone(), harness.receivers())
            .clock(clock.clone())
            // Rule 5 as such: no early retry when a receiver comes back
            // (that exception has its conformance test).
            .config(config.sync_wait(Duration::ZERO).recovery_batch(0))
            .build();
        let mut written: HashMap<i64, (ShardKey, (i32, i64), serde_json::Value)> = HashMap::new();
        let mut retry_after: HashMap<ShardKey, DateTime<Utc>> = HashMap::new();
        let mut backoff_violations = Vec::new();

        for op in ops {
            match op {
                Op::Write {
                    shard: s,
                    category,
                    object,
                } => {
                    let category = if category {
                        OutboxCategory::OrgUpdate
                    } else {
                        OutboxCategory::OrgMemberUpdate
                    };
                    let payload = json!({ "n": written.len() });
                    let id = store.write(&shard(s), category, object, Some(payload.clone()));
                    written.insert(id, (shard(s), (category.value(), object), payload));
                }
                Op::Drain => {
                    let before = harness.seen.lock().unwrap().len();
                    let now = clock_now(&clock);
                    if let Ok(report) = drainer.drain_due(OutboxKind::Region).await {
                        for seen in &harness.seen.lock().unwrap()[before..] {
                            if retry_after.get(&seen.shard).is_some_and(|at| now < *at) {
                                backoff_violations.push(seen.clone());
                            }
                        }
                        for failure in report.failures {
                            retry_after.insert(failure.shard, failure.retry_at);
                        }
                    }
                }
                Op::FailNextDelivery => harness.fail_next.store(true, Ordering::SeqCst),
                Op::CrashDuringDelivery => {
                    harness.hang_next.store(true, Ordering::SeqCst);
                    // Runs until the receiver hangs, then the worker "dies".
                    let _ = drainer.drain_due(OutboxKind::Region).now_or_never();
                    harness.hang_next.store(false, Ordering::SeqCst);
                    // Deliveries of the crashed round were never acknowledged:
                    // they are delivered again (at least once).
                    harness.epoch.fetch_add(1, Ordering::SeqCst);
                }
                Op::ReleaseAbandoned => {
                    let _ = drainer.release_abandoned().await;
                }
                Op::StoreOutage => store.fail_next_calls(1),
                Op::SyncFlush { shard: s } => {
                    let before = harness.seen.lock().unwrap().len();
                    let now = clock_now(&clock);
                    let flushed = drainer.drain_shard(&shard(s), None).await;
                    // Rule 5 holds for flushes too: a backing-off shard waits.
                    for seen in &harness.seen.lock().unwrap()[before..] {
                        if retry_after.get(&seen.shard).is_some_and(|at| now < *at) {
                            backoff_violations.push(seen.clone());
                        }
                    }
                    if let Err(outbox_core::FlushError::Delivery {
                        shard, retry_at, ..
                    }) = flushed
                    {
                        retry_after.insert(shard, retry_at);
                    }
                }
                Op::Advance { millis } => clock.advance(Duration::from_millis(millis)),
            }
        }

        // Recovery: no more failures; time passes; everything drains.
        harness.fail_next.store(false, Ordering::SeqCst);
        store.fail_next_calls(0);
        harness.epoch.fetch_add(1, Ordering::SeqCst);
        for _ in 0..50 {
            if store.pending_count(OutboxKind::Region).await.unwrap() == 0 {
                break;
            }
            clock.advance(Duration::from_secs(120));
            drainer.drain_due(OutboxKind::Region).await.unwrap();
        }
        prop_assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
        prop_assert!(
            backoff_violations.is_empty(),
            "delivered during backoff: {:?}",
            backoff_violations
        );

        let seen = harness.seen.lock().unwrap().clone();
        // Rule 2 (no loss) and 6 (at least once): every row is covered by a
        // delivery of its group with an id at or above its own.
        for (id, (shard, group, _)) in &written {
            prop_assert!(
                seen.iter()
                    .any(|s| &s.shard == shard && s.group == *group && s.id >= *id),
                "row {} was never delivered",
                id
            );
        }
        // Rule 4: a delivery carries the payload of the row it names, the
        // newest of its group at read time.
        for s in &seen {
            prop_assert_eq!(Some(&written[&s.id].2), s.payload.as_ref());
            prop_assert!(s.first_id <= s.id);
        }
        // Rule 3: without crashes or failures in between, a shard's groups are
        // delivered in increasing order of their lowest id.
        let mut last: HashMap<(ShardKey, u64), i64> = HashMap::new();
        for s in seen.iter().filter(|s| !s.synchronous) {
            if let Some(previous) = last.insert((s.shard.clone(), s.epoch), s.first_id) {
                prop_assert!(
                    previous < s.first_id,
                    "shard {} went back from {} to {}",
                    s.shard,
                    previous,
                    s.first_id
                );
            }
        }
        Ok(())
    })
}

fn clock_now(clock: &ManualClock) -> DateTime<Utc> {
    outbox_core::Clock::now(clock)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, .. ProptestConfig::default() })]

    #[test]
    fn random_interleavings_keep_the_rules(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops)?;
    }
}
