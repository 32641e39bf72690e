//! The admin reads' counts (rule 10's admin surface, on any backlog): a
//! count is exact up to the cap and says so; above it, it is the database's
//! estimate or "at least the cap", never a wrong exact number.

use super::{drainer, org, update, Backend};
use crate::Recorder;
use outbox_core::clock::ManualClock;
use outbox_core::drain::DrainConfig;
use outbox_core::shard::OutboxKind;
use outbox_core::store::{Count, StoreAdmin};

/// `count` is above `cap` and says so.
fn assert_capped(count: Count, cap: u64, what: &str) {
    assert!(
        count == Count::AtLeast(cap) || matches!(count, Count::Estimated(n) if n > cap),
        "{what}: {count:?} with a cap of {cap}"
    );
}

/// Five rows, three of them on one shard: with a cap of 5 every count is
/// exact; with a cap of 2 the pending rows, the deep shard and the scope are
/// each "at least 2" or an estimate above 2, the one-row shard stays exact,
/// and the drainer's `count_cap` reaches its view's snapshot and backlog.
pub async fn admin_counts_are_exact_up_to_the_cap_and_capped_above<B: Backend>(backend: &B) {
    let store = backend.fresh("admin_counts").await;
    let (deep, shallow) = (org(1), org(2));
    backend
        .write(
            &store,
            &[
                update(&deep, 1, 0),
                update(&deep, 2, 0),
                update(&deep, 3, 0),
                update(&shallow, 4, 0),
                update(&shallow, 5, 0),
            ],
        )
        .await;
    let region = OutboxKind::Region;

    let exact = store.snapshot(region, 10, 5).await.unwrap();
    assert_eq!(exact.pending, Count::Exact(5));
    let depths: Vec<_> = exact
        .deepest
        .iter()
        .map(|d| (d.shard.clone(), d.depth))
        .collect();
    assert_eq!(
        depths,
        vec![
            (deep.clone(), Count::Exact(3)),
            (shallow.clone(), Count::Exact(2))
        ]
    );
    assert_eq!(exact.dead_letters, Count::Exact(0));
    let reading = store.read_backlog(region, 5).await.unwrap();
    assert_eq!(reading.pending, Count::Exact(5));
    assert_eq!(reading.scopes.len(), 1);
    assert_eq!(reading.scopes[0].depth, Count::Exact(5));
    assert!(reading.oldest_date_added.is_some());

    let capped = store.snapshot(region, 10, 2).await.unwrap();
    assert_capped(capped.pending, 2, "pending rows");
    assert_eq!(capped.deepest[0].shard, deep);
    assert_eq!(capped.deepest[0].depth, Count::AtLeast(2), "the deep shard");
    for shard in &capped.deepest {
        assert!(
            !matches!(shard.depth, Count::Exact(n) if n > 2),
            "{shard:?}: an exact depth above the cap"
        );
    }
    assert_eq!(capped.dead_letters, Count::Exact(0));
    let reading = store.read_backlog(region, 2).await.unwrap();
    assert_capped(reading.pending, 2, "the backlog's pending rows");
    assert_eq!(reading.scopes.len(), 1);
    assert!(!reading.scopes[0].depth.is_exact(), "{reading:?}");
    assert!(reading.scopes[0].depth.value() >= 2, "{reading:?}");

    let clock = ManualClock::starting_now();
    let view = drainer(
        store.clone(),
        &Recorder::new(),
        &clock,
        DrainConfig::default().count_cap(2),
    )
    .view();
    assert_eq!(view.count_cap(), 2);
    assert_capped(view.snapshot(region, 10).await.unwrap().pending, 2, "view");
    let backlog = view.backlog(region).await.unwrap();
    assert_capped(backlog.depth, 2, "the view's backlog");
    assert!(backlog.oldest_age.is_some());
    assert_eq!(view.pending_count(region).await.unwrap(), 5, "all counted");
}
