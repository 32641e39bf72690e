//! Items that left the crate root, kept at their old paths for one release
//! (until 0.2), each naming its new path. The root shows what an
//! application touches (see the crate docs); what a store's implementer
//! needs is under [`crate::store`].
//!
//! Types are deprecated type aliases and functions deprecated wrappers: a
//! use of the old path compiles and warns with the new one. Traits cannot
//! be aliased, and rustc (1.95) does not warn on a `#[deprecated]`
//! re-export, so the four traits are plain hidden re-exports: old code
//! compiles, silently.
//!
//! The feature `test-utils` gated `MemoryStore` (always built now) and
//! `outbox_core::testing`, which cannot come back here (`outbox-testing`
//! depends on this crate): a build of a crate that turns it on fails at
//! once with what to write instead. Builds of this crate itself
//! (`--all-features`: docs.rs, `cargo package`, the workspace's lints) are
//! not refused: there it is the primary package.

#![allow(missing_docs)]

use chrono::{DateTime, Utc};

// The store traits at their old root paths (no warning: see the module
// docs).
#[doc(hidden)]
pub use crate::store::{ClaimBeforeCommit, DrainStore, Store, StoreAdmin};

#[deprecated(since = "0.1.1", note = "use `outbox_core::store::ClaimOrder`")]
#[doc(hidden)]
pub type ClaimOrder = crate::store::ClaimOrder;

#[deprecated(since = "0.1.1", note = "use `outbox_core::store::ClaimRequest`")]
#[doc(hidden)]
pub type ClaimRequest = crate::store::ClaimRequest;

#[deprecated(since = "0.1.1", note = "use `outbox_core::store::ClaimedShard`")]
#[doc(hidden)]
pub type ClaimedShard = crate::store::ClaimedShard;

#[deprecated(since = "0.1.1", note = "use `outbox_core::store::CommitBatch`")]
#[doc(hidden)]
pub type CommitBatch = crate::store::CommitBatch;

#[deprecated(since = "0.1.1", note = "use `outbox_core::store::CommitOutcome`")]
#[doc(hidden)]
pub type CommitOutcome = crate::store::CommitOutcome;

#[deprecated(since = "0.1.1", note = "use `outbox_core::store::DeadLetter`")]
#[doc(hidden)]
pub type DeadLetter = crate::store::DeadLetter;

#[deprecated(since = "0.1.1", note = "use `outbox_core::store::DueClaim`")]
#[doc(hidden)]
pub type DueClaim = crate::store::DueClaim;

#[deprecated(since = "0.1.1", note = "use `outbox_core::store::ShardClaim`")]
#[doc(hidden)]
pub type ShardClaim = crate::store::ShardClaim;

#[deprecated(since = "0.1.1", note = "use `outbox_core::store::ShardCommit`")]
#[doc(hidden)]
pub type ShardCommit = crate::store::ShardCommit;

#[deprecated(since = "0.1.1", note = "use `outbox_core::store::ShardEnd`")]
#[doc(hidden)]
pub type ShardEnd = crate::store::ShardEnd;

#[deprecated(since = "0.1.1", note = "use `outbox_core::store::StoredRow`")]
#[doc(hidden)]
pub type StoredRow = crate::store::StoredRow;

#[deprecated(since = "0.1.1", note = "use `outbox_core::coalesce::CoalescingGroup`")]
#[doc(hidden)]
pub type CoalescingGroup = crate::coalesce::CoalescingGroup;

#[deprecated(since = "0.1.1", note = "use `outbox_core::memory::MemoryTransaction`")]
#[doc(hidden)]
pub type MemoryTransaction = crate::memory::MemoryTransaction;

#[deprecated(since = "0.1.1", note = "use `outbox_core::shard::CLAIM_BUCKETS`")]
#[doc(hidden)]
pub const CLAIM_BUCKETS: i32 = crate::shard::CLAIM_BUCKETS;

#[deprecated(
    since = "0.1.1",
    note = "use `outbox_core::shard::MAX_BUCKETS_PER_CLAIM`"
)]
#[doc(hidden)]
pub const MAX_BUCKETS_PER_CLAIM: usize = crate::shard::MAX_BUCKETS_PER_CLAIM;

#[deprecated(since = "0.1.1", note = "use `outbox_core::coalesce::coalesce`")]
#[doc(hidden)]
pub fn coalesce(
    rows: Vec<crate::store::StoredRow>,
    coalesces: impl Fn(i32) -> bool,
) -> Vec<crate::coalesce::CoalescingGroup> {
    crate::coalesce::coalesce(rows, coalesces)
}

#[deprecated(
    since = "0.1.1",
    note = "use `outbox_core::store::due_at_once`: the `scheduled_for` of a row due at once"
)]
#[doc(hidden)]
pub fn the_past() -> DateTime<Utc> {
    crate::schedule::due_at_once()
}

#[deprecated(since = "0.1.1", note = "use `outbox_core::store::paused_until`")]
#[doc(hidden)]
pub fn paused_until() -> DateTime<Utc> {
    crate::schedule::paused_until()
}

#[deprecated(since = "0.1.1", note = "use `outbox_core::store::quarantined_until`")]
#[doc(hidden)]
pub fn quarantined_until() -> DateTime<Utc> {
    crate::schedule::quarantined_until()
}

#[cfg(feature = "test-utils")]
const _: () = if option_env!("CARGO_PRIMARY_PACKAGE").is_none() {
    panic!(
        "outbox-core's feature `test-utils` is gone: `MemoryStore` is always built, and the test \
         support is the `outbox-testing` crate. In Cargo.toml, remove `test-utils` and add \
         `outbox-testing = \"0.1\"` under [dev-dependencies]; in code, replace \
         `outbox_core::testing::` with `outbox_testing::`, and `outbox_core::conformance`, \
         `outbox_core::conformance_tests!` and `outbox_core::simulation` with the same names \
         in `outbox_testing`."
    )
};
