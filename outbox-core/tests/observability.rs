//! Metrics are emitted with the documented names and tags.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::HashMap;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use outbox_core::{Drainer, HandlerError, MemoryStore, Message, OutboxKind, Receivers, ShardKey};

outbox_core::registry! {
    OrgScope = 0 {
        OrgUpdate = 1,
        OrgRename = 2,
    }
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

    let mut seen: HashMap<(String, Vec<(String, String)>), DebugValue> = HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let mut labels: Vec<(String, String)> = key
            .key()
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        seen.insert((key.key().name().to_owned(), labels), value);
    }
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
