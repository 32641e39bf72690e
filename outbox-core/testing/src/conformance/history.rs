//! The workers' history samples: recorded by several workers, listed per
//! table since a time, a sample recorded twice kept once, old ones pruned
//! as new ones are written.

use std::time::Duration;

use super::{drainer, Backend};
use crate::Recorder;
use outbox_core::clock::{Clock, ManualClock};
use outbox_core::drain::DrainConfig;
use outbox_core::history::{points, Sample};
use outbox_core::shard::OutboxKind;
use outbox_core::store::StoreAdmin;

fn sample(clock: &ManualClock, owner: &str, scope: Option<&str>, depth: u64) -> Sample {
    Sample {
        at: chrono::DateTime::from_timestamp(clock.now().timestamp(), 0).unwrap(),
        kind: OutboxKind::Region,
        scope: scope.map(str::to_owned),
        owner: owner.to_owned(),
        depth,
        oldest_age: Some(Duration::from_millis(depth * 1000 + 5)),
        delivered: depth / 2,
        failed: 1,
        dead_lettered: 0,
        dead_letters: 3,
    }
}

/// Two workers' samples of one time merge into one point; a sample sent
/// again is kept once; another table's are not listed; samples older than
/// the retention are removed when the next are written.
pub async fn the_history_keeps_every_workers_samples_for_its_retention<B: Backend>(backend: &B) {
    let store = backend.fresh("history").await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    let view = drainer(store.clone(), &recorder, &clock, DrainConfig::default()).view();
    let hour = Duration::from_secs(3600);
    let keep_after = |clock: &ManualClock| clock.now() - chrono::Duration::hours(24);

    let first = [
        sample(&clock, "a", None, 10),
        sample(&clock, "a", Some("OrgScope"), 7),
    ];
    store
        .record_history(&first, keep_after(&clock))
        .await
        .unwrap();
    store
        .record_history(
            &[sample(&clock, "b", None, 12), first[0].clone()],
            keep_after(&clock),
        )
        .await
        .unwrap();
    let mut control = sample(&clock, "a", None, 99);
    control.kind = OutboxKind::Control;
    store
        .record_history(&[control], keep_after(&clock))
        .await
        .unwrap();
    clock.advance(hour);
    store
        .record_history(&[sample(&clock, "a", None, 4)], keep_after(&clock))
        .await
        .unwrap();

    let samples = view.history(OutboxKind::Region, 2 * hour).await.unwrap();
    assert_eq!(samples.len(), 4, "{samples:#?}");
    assert!(samples.contains(&first[1]), "scopes and ages as written");
    let merged = points(&samples, OutboxKind::Region);
    let got: Vec<(u64, u64, u64)> = merged
        .iter()
        .map(|p| (p.depth, p.delivered, p.failed))
        .collect();
    assert_eq!(got, [(12, 11, 2), (4, 2, 1)]);
    assert_eq!(
        view.history(OutboxKind::Region, hour / 2)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        view.history(OutboxKind::Control, 2 * hour)
            .await
            .unwrap()
            .len(),
        1
    );

    // A day later the first hour's samples go as the next are written.
    clock.advance(24 * hour - Duration::from_secs(1));
    store
        .record_history(&[sample(&clock, "a", None, 1)], keep_after(&clock))
        .await
        .unwrap();
    let left = view.history(OutboxKind::Region, 48 * hour).await.unwrap();
    let depths: Vec<u64> = left.iter().map(|s| s.depth).collect();
    assert_eq!(depths, [4, 1]);
}
