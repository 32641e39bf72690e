//! Metrics are emitted with the documented names and tags.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::HashMap;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use outbox_core::{Drainer, HandlerError, MemoryStore, Message, OutboxKind, Receivers, ShardKey};

outbox_core::registry! {
    OrgScope = 0 {
        OrgUpdate = 1,
        OrgRename = 2,
    }
}

/// What was recorded, by name and sorted labels.
fn recorded(snapshotter: &Snapshotter) -> HashMap<(String, Vec<(String, String)>), DebugValue> {
    let mut seen = HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let mut labels: Vec<(String, String)> = key
            .key()
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        seen.insert((key.key().name().to_owned(), labels), value);
    }
    seen
}

#[test]
fn deliveries_emit_the_sentry_metrics_tagged_by_category_and_mode() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let store = MemoryStore::new();
            let shard = ShardKey::region(OutboxScope::OrgScope, 1);
            for _ in 0..3 {
                store.write(&shard, OutboxCategory::OrgUpdate, 1, None);
            }
            let synchronous = store.write(
                &ShardKey::region(OutboxScope::OrgScope, 2),
                OutboxCategory::OrgRename,
                2,
                None,
            );
            let receivers = Receivers::new()
                .on(
                    OutboxCategory::OrgUpdate,
                    |_m: Message<OutboxCategory>| async { Ok::<_, HandlerError>(()) },
                )
                .on(
                    OutboxCategory::OrgRename,
                    |_m: Message<OutboxCategory>| async { Ok::<_, HandlerError>(()) },
                );
            let drainer = Drainer::new(store, receivers);
            drainer
                .drain_shard(
                    &ShardKey::region(OutboxScope::OrgScope, 2),
                    Some(synchronous),
                )
                .await
                .unwrap();
            drainer.drain_due(OutboxKind::Region).await.unwrap();
        });
    });

    let seen = recorded(&snapshotter);
    let tags = |category: &str, synchronous: &str| {
        vec![
            ("category".to_owned(), category.to_owned()),
            ("kind".to_owned(), "region".to_owned()),
            ("synchronous".to_owned(), synchronous.to_owned()),
        ]
    };
    assert_eq!(
        seen.get(&("outbox.processed".to_owned(), tags("OrgUpdate", "false"))),
        Some(&DebugValue::Counter(3)),
        "three coalesced rows processed in the background"
    );
    assert_eq!(
        seen.get(&("outbox.processed".to_owned(), tags("OrgRename", "true"))),
        Some(&DebugValue::Counter(1))
    );
    for name in [
        "outbox.processing_lag",
        "outbox.coalesced_net_queue_time",
        "outbox.send_signal.duration",
    ] {
        match seen.get(&(name.to_owned(), tags("OrgUpdate", "false"))) {
            Some(DebugValue::Histogram(values)) => assert_eq!(values.len(), 1, "{name}"),
            other => panic!("{name}: {other:?}"),
        }
    }
}

/// Coalesced rows and retries are counted; the worker publishes the
/// backlog gauges (depth, oldest age, failing and quarantined shards).
#[test]
fn coalescing_retries_and_the_backlog_are_measured() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use outbox_core::worker::WorkerBuilder;
    use outbox_core::ManualClock;

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let store = MemoryStore::new();
            let flaky = ShardKey::region(OutboxScope::OrgScope, 1);
            for _ in 0..3 {
                store.write(&flaky, OutboxCategory::OrgUpdate, 1, None);
            }
            store.write(
                &ShardKey::region(OutboxScope::OrgScope, 2),
                OutboxCategory::OrgRename,
                2,
                None,
            );
            let calls = Arc::new(AtomicUsize::new(0));
            let receivers = Receivers::new()
                .on(OutboxCategory::OrgUpdate, {
                    let calls = calls.clone();
                    move |_m: Message<OutboxCategory>| {
                        let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
                        async move {
                            if first {
                                Err(HandlerError::from("down"))
                            } else {
                                Ok(())
                            }
                        }
                    }
                })
                .on(
                    OutboxCategory::OrgRename,
                    |_m: Message<OutboxCategory>| async {
                        Err::<(), _>(outbox_core::permanent("refused for good"))
                    },
                );
            let clock = ManualClock::starting_now();
            let drainer = Drainer::builder(store, receivers)
                .clock(clock.clone())
                .build();
            drainer.drain_due(OutboxKind::Region).await.unwrap();
            clock.advance(Duration::from_secs(5));
            let backlog = drainer.view().backlog(OutboxKind::Region).await.unwrap();
            assert_eq!(
                (
                    backlog.depth,
                    backlog.failing_shards,
                    backlog.quarantined_shards
                ),
                (outbox_core::Count::Exact(4), 1, 1)
            );
            assert!(backlog.oldest_age.unwrap() >= Duration::from_secs(5));
            let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
            assert_eq!(report.deliveries, 1, "the flaky shard, coalesced");

            let worker = WorkerBuilder::new(drainer)
                .gauge_interval(Some(Duration::from_secs(3600)))
                .spawn();
            worker.ready().await;
            worker.shutdown().await;
        });
    });

    let seen = recorded(&snapshotter);
    let delivered = vec![
        ("category".to_owned(), "OrgUpdate".to_owned()),
        ("kind".to_owned(), "region".to_owned()),
        ("synchronous".to_owned(), "false".to_owned()),
    ];
    assert_eq!(
        seen.get(&("outbox.coalesced".to_owned(), delivered.clone())),
        Some(&DebugValue::Counter(2)),
        "two rows coalesced into the newest"
    );
    assert_eq!(
        seen.get(&("outbox.retried".to_owned(), delivered)),
        Some(&DebugValue::Counter(1)),
        "one success after a failure"
    );
    let kind = vec![("kind".to_owned(), "region".to_owned())];
    let gauge = |name: &str| match seen.get(&(name.to_owned(), kind.clone())) {
        Some(DebugValue::Gauge(value)) => value.into_inner(),
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(gauge("outbox.backlog.depth"), 1.0, "the quarantined row");
    assert!(gauge("outbox.backlog.oldest_age") >= 5.0);
    assert_eq!(gauge("outbox.failing_shards"), 0.0);
    assert_eq!(gauge("outbox.quarantined_shards"), 1.0);
    assert_eq!(gauge("outbox.dead_letters"), 0.0);
    let scope_gauge = |name: &str, scope: &str| {
        let tags = vec![
            ("kind".to_owned(), "region".to_owned()),
            ("scope".to_owned(), scope.to_owned()),
        ];
        match seen.get(&(name.to_owned(), tags)) {
            Some(DebugValue::Gauge(value)) => value.into_inner(),
            other => panic!("{name} {scope}: {other:?}"),
        }
    };
    let scope = "OrgScope";
    assert_eq!(scope_gauge("outbox.scope.backlog.depth", scope), 1.0);
    assert!(scope_gauge("outbox.scope.backlog.oldest_age", scope) >= 5.0);
}

/// A worker registers, at 0, the counters that alerts count the first
/// increase of, for every live category of the kinds it drains: without
/// them `increase(outbox_dead_lettered[10m]) > 0` misses the first dead
/// letter (the series would start at 1).
#[test]
fn a_worker_registers_the_alerted_counters_at_zero() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let receivers = Receivers::new()
                .discard(OutboxCategory::OrgUpdate)
                .discard(OutboxCategory::OrgRename);
            let drainer = Drainer::new(MemoryStore::new(), receivers);
            let worker = outbox_core::worker::WorkerBuilder::new(drainer)
                .kinds([OutboxKind::Region])
                .gauge_interval(None)
                .spawn();
            worker.shutdown().await;
        });
    });
    let seen = recorded(&snapshotter);
    let zero = |name: &str, labels: &[(&str, &str)]| {
        let mut labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        labels.sort();
        let key = (name.to_owned(), labels);
        assert!(
            matches!(seen.get(&key), Some(DebugValue::Counter(0))),
            "{key:?} not registered at 0: {:?}",
            seen.get(&key)
        );
    };
    for category in ["OrgUpdate", "OrgRename"] {
        let tags = [("category", category), ("kind", "region")];
        zero("outbox.dead_lettered", &tags);
        zero("outbox.quarantined", &tags);
        for sync in ["false", "true"] {
            let tags = [
                ("category", category),
                ("kind", "region"),
                ("synchronous", sync),
            ];
            zero("outbox.processed", &tags);
            let mut failed = tags.to_vec();
            failed.push(("reason", "handler"));
            zero("outbox.delivery_failed", &failed);
        }
    }
    for name in [
        "outbox.claim_lost",
        "outbox.culled",
        "outbox.abandoned_claims_released",
    ] {
        zero(name, &[("kind", "region")]);
    }
    assert!(
        !seen
            .keys()
            .any(|(_, labels)| labels.contains(&("kind".to_owned(), "control".to_owned()))),
        "only the kinds it drains"
    );
}
