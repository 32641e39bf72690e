//! Old paths and names kept until 0.2: items that left the crate root
//! (each old path names the same item as the new one, and a use of it
//! warns with the new path: `tests/ui/deprecated_root_paths.rs`), and the
//! deprecated `Drainer` and `DrainConfig` methods, which do what their
//! successors do.

#![allow(deprecated, clippy::unwrap_used, missing_docs)]

use std::any::TypeId;

fn same<Old: ?Sized + 'static, New: ?Sized + 'static>() -> bool {
    TypeId::of::<Old>() == TypeId::of::<New>()
}

#[test]
fn every_old_root_path_names_the_moved_item() {
    use outbox_core::{coalesce, memory, shard, store};

    assert!(same::<outbox_core::ClaimOrder, store::ClaimOrder>());
    assert!(same::<outbox_core::ClaimRequest, store::ClaimRequest>());
    assert!(same::<outbox_core::ClaimedShard, store::ClaimedShard>());
    assert!(same::<outbox_core::CommitBatch, store::CommitBatch>());
    assert!(same::<outbox_core::CommitOutcome, store::CommitOutcome>());
    assert!(same::<outbox_core::DeadLetter, store::DeadLetter>());
    assert!(same::<outbox_core::DueClaim, store::DueClaim>());
    assert!(same::<outbox_core::ShardClaim, store::ShardClaim>());
    assert!(same::<outbox_core::ShardCommit, store::ShardCommit>());
    assert!(same::<outbox_core::ShardEnd, store::ShardEnd>());
    assert!(same::<outbox_core::StoredRow, store::StoredRow>());
    assert!(same::<
        outbox_core::CoalescingGroup,
        coalesce::CoalescingGroup,
    >());
    assert!(same::<
        outbox_core::MemoryTransaction,
        memory::MemoryTransaction,
    >());
    assert!(same::<dyn outbox_core::DrainStore, dyn store::DrainStore>());
    assert!(same::<dyn outbox_core::StoreAdmin, dyn store::StoreAdmin>());
    assert!(same::<
        dyn outbox_core::ClaimBeforeCommit,
        dyn store::ClaimBeforeCommit,
    >());
    assert!(same::<dyn outbox_core::Store, dyn store::Store>());

    assert_eq!(outbox_core::CLAIM_BUCKETS, shard::CLAIM_BUCKETS);
    assert_eq!(
        outbox_core::MAX_BUCKETS_PER_CLAIM,
        shard::MAX_BUCKETS_PER_CLAIM
    );
    assert_eq!(outbox_core::the_past(), store::due_at_once());
    assert_eq!(outbox_core::paused_until(), store::paused_until());
    assert_eq!(outbox_core::quarantined_until(), store::quarantined_until());
    assert!(outbox_core::coalesce(Vec::new(), |_| true).is_empty());
}

#[test]
fn a_store_written_against_the_old_paths_still_compiles() {
    // What a store's implementer wrote: bounds, enum variants and struct
    // literals through the old root paths.
    fn drains<S: outbox_core::DrainStore + outbox_core::StoreAdmin>(_: &S) {}
    drains(&outbox_core::MemoryStore::new());
    let end = outbox_core::ShardEnd::Done;
    assert!(matches!(end, outbox_core::ShardEnd::Done));
    let outcome = outbox_core::CommitOutcome {
        deleted: 1,
        ..Default::default()
    };
    assert_eq!(outcome.deleted, 1);
}

outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 } }

#[tokio::test]
async fn deprecated_drainer_methods_do_what_their_successors_do() {
    use outbox_core::{
        ControlTarget, DrainConfig, Drainer, ManualClock, MemoryStore, OutboxKind, Receivers,
        ShardKey,
    };
    use std::time::Duration;

    let store = MemoryStore::new();
    let receivers = Receivers::new().discard(OutboxCategory::OrgUpdate);
    let config = DrainConfig::default()
        .lease(Duration::from_secs(5))
        .shards_per_claim(8)
        .max_rows_per_claim(8)
        .delete_chunk(8);
    assert_eq!(config, DrainConfig::default().lease(Duration::from_secs(5)));
    let clock = ManualClock::new(outbox_core::store::due_at_once());
    let drainer = Drainer::new(store.clone(), receivers)
        .with_config(config)
        .with_clock(clock.clone())
        .with_owner("old")
        .with_dead_letter(OutboxScope::OrgScope, 3);
    assert_eq!(drainer.config().lease_duration(), Duration::from_secs(5));
    assert_eq!(drainer.now(), outbox_core::Clock::now(&clock));

    let shard = ShardKey::region(OutboxScope::OrgScope, 7);
    store.write(&shard, OutboxCategory::OrgUpdate, 7, None);
    assert_eq!(
        drainer
            .admin()
            .pending_count(OutboxKind::Region)
            .await
            .unwrap(),
        1
    );
    drainer
        .pause(ControlTarget::Shard(shard.clone()), None)
        .await
        .unwrap();
    assert_eq!(drainer.controls().current().len(), 1);
    assert!(drainer.resume(&ControlTarget::Shard(shard)).await.unwrap());
    let backlog = drainer.backlog(OutboxKind::Region).await.unwrap();
    assert_eq!(
        backlog,
        drainer.view().backlog(OutboxKind::Region).await.unwrap()
    );
}

#[test]
fn old_root_paths_warn_with_the_new_path() {
    trybuild::TestCases::new().compile_fail("tests/ui/deprecated_root_paths.rs");
}
