//! Rule 1: an outbox row exists if and only if the transaction that wrote it
//! committed. A rolled-back unit of work leaves no row and fires nothing.

use super::{drainer, org, update, Backend, NewRow, OutboxCategory, OutboxScope};
use crate::{drain_until_idle, Recorder};
use outbox_core::clock::ManualClock;
use outbox_core::drain::DrainConfig;
use outbox_core::shard::{OutboxKind, ShardKey};
use outbox_core::store::StoreAdmin;

fn control(region: &str, id: i64) -> ShardKey {
    ShardKey::control(region, OutboxScope::OrganizationScope, id)
}

/// Rolled-back writes, in both outboxes, leave nothing to count or deliver.
pub async fn rolled_back_writes_leave_no_row_and_fire_nothing<B: Backend>(backend: &B) {
    let store = backend.fresh("rolled_back").await;
    backend
        .write_rolled_back(
            &store,
            &[update(&org(1), 1, 1), update(&control("us", 1), 1, 1)],
        )
        .await;
    for kind in OutboxKind::ALL {
        assert_eq!(store.pending_count(kind).await.unwrap(), 0, "{kind}");
    }
    let recorder = Recorder::new();
    let clock = ManualClock::starting_now();
    let drainer = drainer(store.clone(), &recorder, &clock, DrainConfig::default());
    let report = drain_until_idle(&drainer, &OutboxKind::ALL).await.unwrap();
    assert_eq!(report.deliveries, 0);
    assert!(recorder.deliveries().is_empty());
    assert_eq!(recorder.calls(), 0);
}

/// Committed writes are delivered exactly as written: shard, category,
/// object and payload, in both outboxes; then nothing is pending.
pub async fn committed_writes_are_delivered_as_written<B: Backend>(backend: &B) {
    let store = backend.fresh("committed").await;
    let member = NewRow {
        category: OutboxCategory::OrganizationMemberUpdate,
        ..update(&org(1), 9, 2)
    };
    let rows = [
        update(&org(1), 1, 1),
        member,
        update(&org(2), 2, 3),
        update(&control("us", 1), 1, 4),
        update(&control("de", 1), 1, 5),
    ];
    let ids = backend.write(&store, &rows).await;
    assert_eq!(ids.len(), rows.len());
    // Each outbox table numbers its own rows, in write order.
    assert!(ids[..3].windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    assert!(ids[3] < ids[4], "{ids:?}");
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 3);
    assert_eq!(store.pending_count(OutboxKind::Control).await.unwrap(), 2);

    let recorder = Recorder::new();
    let clock = ManualClock::starting_now();
    let drainer = drainer(store.clone(), &recorder, &clock, DrainConfig::default());
    drain_until_idle(&drainer, &OutboxKind::ALL).await.unwrap();
    let mut seen: Vec<(
        ShardKey,
        OutboxCategory,
        i64,
        i64,
        Option<serde_json::Value>,
    )> = recorder
        .deliveries()
        .into_iter()
        .map(|d| (d.shard, d.category, d.object, d.id, d.payload))
        .collect();
    seen.sort_by_key(|(shard, _, _, id, _)| (shard.kind(), *id));
    let mut expected: Vec<_> = rows
        .iter()
        .zip(&ids)
        .map(|(row, id)| {
            (
                row.shard.clone(),
                row.category,
                row.object,
                *id,
                row.payload.clone(),
            )
        })
        .collect();
    expected.sort_by_key(|(shard, _, _, id, _)| (shard.kind(), *id));
    assert_eq!(seen, expected);
    for kind in OutboxKind::ALL {
        assert_eq!(store.pending_count(kind).await.unwrap(), 0, "{kind}");
    }
}
