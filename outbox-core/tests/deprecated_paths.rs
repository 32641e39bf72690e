//! Items that left the crate root keep their old paths until 0.2: each
//! old path names the same item as the new one, and a use of it warns with
//! the new path (checked with `deny(deprecated)` in
//! `tests/ui/deprecated_root_paths.rs`).

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
    assert!(same::<outbox_core::CoalescingGroup, coalesce::CoalescingGroup>());
    assert!(same::<outbox_core::MemoryTransaction, memory::MemoryTransaction>());
    assert!(same::<dyn outbox_core::DrainStore, dyn store::DrainStore>());
    assert!(same::<dyn outbox_core::StoreAdmin, dyn store::StoreAdmin>());
    assert!(same::<dyn outbox_core::ClaimBeforeCommit, dyn store::ClaimBeforeCommit>());
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

#[test]
fn old_root_paths_warn_with_the_new_path() {
    trybuild::TestCases::new().compile_fail("tests/ui/deprecated_root_paths.rs");
}
