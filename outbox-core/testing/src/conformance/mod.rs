//! One suite of tests for every store: the rules of the outbox, each in its
//! own file, generic over a [`Backend`].
//!
//! | file | rule |
//! |---|---|
//! | [`atomic_write`] | 1. an outbox row exists iff its transaction committed |
//! | [`no_loss`] | 2. crashes and cancellations change when, never whether |
//! | [`order`] | 3. groups in order of their lowest pending id |
//! | [`exclusivity`] | 3. at most one worker on a shard, in any process |
//! | [`coalescing`] | 4. the newest payload of a group, rows written meanwhile stay; `(no_coalesce)` categories deliver every row |
//! | [`backoff`] | 5. a failing shard waits as a whole, whoever asks; dead letters; permanent errors quarantine |
//! | [`control`] | 2. an operator's pause or cull holds in every process; lifted, the kept rows flow; the operators' audit log |
//! | [`admin_counts`] | 10. the admin reads' counts: exact up to the cap, above it estimated or "at least", and say which |
//! | [`at_least_once`] | 6. a delivery whose commit was lost is made again |
//! | [`fencing`] | 7. no transaction across a receiver; an expired claim writes nothing |
//! | [`fencing_tokens`] | 12. tokens grow with every claim of a shard; a worker paused past its lease is refused by a fenced receiver, and calls nothing once its lease ended by its own clock |
//! | [`batch`] | 3. batch receivers: at most one message per shard in a batch, each shard in order; a failure in a batch holds its shard only |
//! | [`history`] | operators: the workers' history samples, merged, kept for their retention |
//! | [`flush`] | 3, 6. the synchronous flush claimed before the commit: never waited for, never shared, taken back by a rollback, delivered again when its completion is lost |
//! | [`payload_version`] | a row's payload version, as written, through every claim, a dead letter and its replay; parked shards listed and counted apart |
//!
//! `MemoryStore` runs it in this crate; `outbox-seaorm` runs it against real
//! PostgreSQL and SQLite. Tests synchronise on gates, barriers and a
//! [`ManualClock`], never on sleeps.
//!
//! A store crate implements [`Backend`] for its store in a test file, and
//! [`conformance_tests!`](crate::conformance_tests!) writes one
//! `#[tokio::test]` per rule. This crate's own `tests/conformance.rs`, for
//! [`MemoryStore`](outbox_core::MemoryStore):
//!
//! ```
//! use async_trait::async_trait;
//! use outbox_testing::conformance::{Backend, NewRow, WriterTransaction};
//! use outbox_core::MemoryStore;
//!
//! #[derive(Clone)]
//! struct MemoryBackend;
//!
//! #[async_trait]
//! impl Backend for MemoryBackend {
//!     type Store = MemoryStore;
//!
//!     async fn fresh(&self, _label: &str) -> MemoryStore {
//!         MemoryStore::new()
//!     }
//!
//!     async fn write(&self, store: &MemoryStore, rows: &[NewRow]) -> Vec<i64> {
//!         let mut txn = store.begin();
//!         let ids = rows.iter().map(|row| row.write_to(&mut txn)).collect();
//!         txn.commit();
//!         ids
//!     }
//!
//!     async fn write_rolled_back(&self, store: &MemoryStore, rows: &[NewRow]) {
//!         let mut txn = store.begin();
//!         for row in rows {
//!             row.write_to(&mut txn);
//!         }
//!         drop(txn); // rolls back
//!     }
//!
//!     async fn begin(&self, store: &MemoryStore) -> Box<dyn WriterTransaction> {
//!         Box::new(store.begin()) // a `MemoryTransaction` is one
//!     }
//!
//!     async fn reconnect(&self, store: &MemoryStore) -> MemoryStore {
//!         store.clone() // one process: the same store
//!     }
//! }
//!
//! outbox_testing::conformance_tests!(MemoryBackend);
//!
//! // Each rule is also a function to call with a backend:
//! #[tokio::main]
//! async fn main() {
//!     outbox_testing::conformance::atomic_write::rolled_back_writes_leave_no_row_and_fire_nothing(
//!         &MemoryBackend,
//!     )
//!     .await;
//! }
//! ```

// These are tests: a failed expectation is a panic, with the value in it.
#![allow(clippy::unwrap_used)]

pub mod admin_counts;
pub mod at_least_once;
pub mod atomic_write;
pub mod backoff;
pub mod batch;
pub mod coalescing;
pub mod control;
pub mod exclusivity;
pub mod fencing;
pub mod fencing_tokens;
pub mod flush;
pub mod history;
pub mod no_loss;
pub mod order;
pub mod payload_version;

use async_trait::async_trait;
use serde_json::Value;

use crate::Recorder;
use outbox_core::clock::ManualClock;
use outbox_core::contract::{Contract, Upcasts};
use outbox_core::drain::{DrainConfig, Drainer, DrainerBuilder};
use outbox_core::memory::MemoryTransaction;
use outbox_core::schemars::JsonSchema;
use outbox_core::shard::ShardKey;
use outbox_core::store::{ClaimBeforeCommit, DrainStore, StoreAdmin};

outbox_core::registry! {
    /// Organization-owned data, sharded by organization id.
    OrganizationScope = 0 (shard_field = "organization_id") {
        /// An organization changed.
        OrganizationUpdate = 1,
        /// A membership changed.
        OrganizationMemberUpdate = 2,
        /// A webhook per change: never coalesced.
        OrganizationWebhook = 3 (no_coalesce),
        /// An organization renamed: typed, its payload an
        /// [`OrganizationName`] (version 2, which reads version 1 too).
        OrganizationRenamed = 4 (payload = OrganizationName),
    }
    /// One shard per event.
    AuditLogScope = 2 {
        /// An audit event.
        AuditLogEvent = 20,
    }
}

/// Version 1 of [`OutboxCategory::OrganizationRenamed`]'s payload.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, JsonSchema)]
#[schemars(crate = "outbox_core::schemars")]
pub struct OrganizationNameV1 {
    /// The new name.
    pub name: String,
}

impl Contract for OrganizationNameV1 {
    const VERSION: u32 = 1;
}

/// The payload of [`OutboxCategory::OrganizationRenamed`]: version 2, which
/// upcasts version 1 (without a slug: the name's, lowercased).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, JsonSchema)]
#[schemars(crate = "outbox_core::schemars")]
pub struct OrganizationName {
    /// The new name.
    pub name: String,
    /// Its slug.
    pub slug: String,
}

impl From<OrganizationNameV1> for OrganizationName {
    fn from(v1: OrganizationNameV1) -> Self {
        let slug = v1.name.to_lowercase();
        Self {
            name: v1.name,
            slug,
        }
    }
}

impl Contract for OrganizationName {
    const VERSION: u32 = 2;
    fn older() -> Upcasts<Self> {
        Upcasts::from::<OrganizationNameV1>()
    }
}

/// A store under test, and how to write rows into it as the write API does.
#[async_trait]
pub trait Backend: Clone + Send + Sync + 'static {
    /// The store.
    type Store: DrainStore + StoreAdmin + Clone;

    /// A fresh, empty store (a new database), kept until the backend drops.
    async fn fresh(&self, label: &str) -> Self::Store;

    /// Writes `rows` in one transaction that commits; returns their ids.
    async fn write(&self, store: &Self::Store, rows: &[NewRow]) -> Vec<i64>;

    /// Writes `rows` in one transaction that rolls back.
    async fn write_rolled_back(&self, store: &Self::Store, rows: &[NewRow]);

    /// Begins a writer's transaction, left open until the caller commits it
    /// or rolls it back: a request that writes rows and claims their shards
    /// before its `COMMIT` (the synchronous flush, see [`flush`]).
    async fn begin(&self, store: &Self::Store) -> Box<dyn WriterTransaction>;

    /// Another store over the same data with connections of its own: another
    /// process.
    async fn reconnect(&self, store: &Self::Store) -> Self::Store;

    /// Whether other connections can write (a drain's claim, another
    /// writer's transaction) while a writer's transaction is open. `false`
    /// where one transaction writes at a time (SQLite: the others would wait
    /// for its lock); the tests then run those writes after it ended instead.
    /// Default: `true`.
    fn concurrent_writers(&self) -> bool {
        true
    }
}

/// A writer's transaction left open ([`Backend::begin`]): it writes rows,
/// claims their shards before it commits (it is the
/// [`ClaimBeforeCommit`] that [`PreparedFlush::claim`](outbox_core::PreparedFlush::claim)
/// runs on), then commits or rolls back. A failure is a panic.
#[async_trait]
pub trait WriterTransaction: ClaimBeforeCommit {
    /// Writes `rows` in the transaction; returns their ids.
    async fn write(&mut self, rows: &[NewRow]) -> Vec<i64>;

    /// Commits: the rows and the claims made on it become visible.
    async fn commit(self: Box<Self>);

    /// Rolls back: the rows and the claims made on it are gone.
    async fn rollback(self: Box<Self>);
}

#[async_trait]
impl WriterTransaction for MemoryTransaction {
    async fn write(&mut self, rows: &[NewRow]) -> Vec<i64> {
        rows.iter().map(|row| row.write_to(self)).collect()
    }

    async fn commit(self: Box<Self>) {
        MemoryTransaction::commit(*self);
    }

    async fn rollback(self: Box<Self>) {
        drop(self);
    }
}

/// A row to write.
#[derive(Clone, Debug, PartialEq)]
pub struct NewRow {
    /// Its shard (region or control outbox).
    pub shard: ShardKey,
    /// Its category; its scope must be the shard's.
    pub category: OutboxCategory,
    /// The object: with the category, its coalescing group.
    pub object: i64,
    /// The payload.
    pub payload: Option<Value>,
    /// The payload version stored with it: `None` as an untyped writer
    /// writes (every category but a typed one), else as a typed writer of
    /// that version would (or any writer that stores versions: the write
    /// API of a store takes it as it is, `OutboxMessage::payload_version`
    /// in `outbox-seaorm`).
    pub payload_version: Option<u32>,
}

impl NewRow {
    /// Writes the row in a [`MemoryTransaction`], its payload version
    /// included; returns its id.
    pub fn write_to(&self, txn: &mut MemoryTransaction) -> i64 {
        txn.write_versioned(
            &self.shard,
            outbox_core::registry::Category::value(self.category),
            self.object,
            self.payload.clone(),
            self.payload_version,
        )
    }
}

/// A region-outbox shard of an organization.
pub fn org(id: i64) -> ShardKey {
    ShardKey::region(OutboxScope::OrganizationScope, id)
}

/// A region-outbox shard of an audit event.
pub fn audit(id: i64) -> ShardKey {
    ShardKey::region(OutboxScope::AuditLogScope, id)
}

/// An organization update of `object` on `shard`, with payload `{"v": v}`.
pub fn update(shard: &ShardKey, object: i64, v: i64) -> NewRow {
    NewRow {
        shard: shard.clone(),
        category: OutboxCategory::OrganizationUpdate,
        object,
        payload: Some(serde_json::json!({ "v": v })),
        payload_version: None,
    }
}

/// An organization renamed (the typed category), of `object` on `shard`,
/// to `name`, as a writer of payload version `version` stores it: `Some(2)`
/// is [`OrganizationName`]'s own (`{"name", "slug"}`), `Some(1)` and `None`
/// (an untyped write, read as version 1) are [`OrganizationNameV1`]'s
/// (`{"name"}`), any other a version no receiver here knows (`{"name"}`
/// too).
pub fn renamed(shard: &ShardKey, object: i64, name: &str, version: Option<u32>) -> NewRow {
    let payload = match version {
        Some(2) => serde_json::json!({ "name": name, "slug": name.to_lowercase() }),
        _ => serde_json::json!({ "name": name }),
    };
    NewRow {
        shard: shard.clone(),
        category: OutboxCategory::OrganizationRenamed,
        object,
        payload: Some(payload),
        payload_version: version,
    }
}

/// A webhook (a category that does not coalesce) about `object` on `shard`,
/// with payload `{"v": v}`.
pub fn webhook(shard: &ShardKey, object: i64, v: i64) -> NewRow {
    NewRow {
        category: OutboxCategory::OrganizationWebhook,
        ..update(shard, object, v)
    }
}

/// The suite's drainer: `recorder` as receivers, `clock` as clock, `config`.
pub fn drainer<S: DrainStore + StoreAdmin>(
    store: S,
    recorder: &Recorder<OutboxCategory>,
    clock: &ManualClock,
    config: DrainConfig,
) -> Drainer<OutboxCategory> {
    drainer_builder(store, recorder, clock, config).build()
}

/// A builder for [`drainer`]'s drainer, for a test that sets more (dead
/// letters, an owner).
pub fn drainer_builder<S: DrainStore + StoreAdmin>(
    store: S,
    recorder: &Recorder<OutboxCategory>,
    clock: &ManualClock,
    config: DrainConfig,
) -> DrainerBuilder<OutboxCategory> {
    Drainer::builder(store, recorder.receivers())
        .clock(clock.clone())
        .config(config)
}

/// The `v` of a delivered payload.
pub fn v(payload: &Option<Value>) -> i64 {
    payload.as_ref().and_then(|p| p["v"].as_i64()).unwrap_or(-1)
}

/// Generates one `#[tokio::test]` per conformance test, in a module
/// `conformance`, each with a fresh backend from `$backend` (an expression
/// evaluated in the calling module's scope). The calling crate needs `tokio`
/// with `macros` and `rt-multi-thread`.
#[macro_export]
macro_rules! conformance_tests {
    ($backend:expr) => {
        $crate::conformance_tests!(@tests $backend;
            atomic_write::rolled_back_writes_leave_no_row_and_fire_nothing,
            atomic_write::committed_writes_are_delivered_as_written,
            no_loss::a_worker_cut_off_mid_delivery_loses_nothing,
            no_loss::a_crashed_worker_is_replaced_once_its_lease_ends,
            order::groups_are_delivered_in_order_of_their_lowest_id,
            order::a_recovered_shard_delivers_its_older_rows_before_newer_ones,
            order::a_sync_flush_delivers_only_up_to_its_id,
            exclusivity::concurrent_drains_and_flushes_never_share_a_shard,
            exclusivity::a_held_bucket_blocks_its_shards_and_no_other,
            exclusivity::a_commit_releases_the_buckets_of_its_shards_only,
            exclusivity::a_claim_beside_its_drainers_round_scans_past_the_rows_it_holds,
            coalescing::only_the_newest_payload_of_a_group_is_delivered,
            coalescing::rows_written_during_a_delivery_stay_for_the_next_round,
            coalescing::a_category_that_does_not_coalesce_delivers_every_row_in_order,
            coalescing::concurrent_writes_of_a_category_that_does_not_coalesce_are_each_delivered,
            coalescing::the_groups_of_many_interleaved_shards_are_each_delivered_once,
            backoff::a_failing_shard_backs_off_as_a_whole_and_others_flow,
            backoff::a_flush_racing_a_drain_on_a_failing_shard_tries_once_per_step,
            backoff::an_opted_in_scope_dead_letters_and_the_shard_goes_on,
            backoff::a_permanent_error_quarantines_its_shard_until_released,
            backoff::a_permanent_error_is_dead_lettered_at_once_where_the_scope_allows,
            backoff::retry_now_leaves_a_shard_whose_bucket_is_held_alone,
            backoff::a_receiver_that_is_back_gets_its_backed_off_shards_at_once,
            control::a_pause_set_in_one_process_holds_in_another_until_resumed,
            control::a_scope_control_holds_its_new_shards_and_a_cull_drops_their_rows,
            control::a_shard_parked_under_a_pause_that_is_gone_is_released_at_startup,
            control::an_admin_snapshot_agrees_with_the_separate_reads,
            control::the_audit_log_keeps_what_operators_did_for_its_retention,
            control::a_blocked_shards_head_set_aside_lets_the_rest_flow,
            control::a_head_is_not_set_aside_while_a_worker_holds_its_shard,
            history::the_history_keeps_every_workers_samples_for_its_retention,
            admin_counts::admin_counts_are_exact_up_to_the_cap_and_capped_above,
            at_least_once::a_delivery_whose_lease_ended_before_its_commit_is_made_again,
            fencing::a_worker_whose_lease_ended_writes_nothing,
            fencing::receivers_run_outside_any_transaction,
            fencing_tokens::fencing_tokens_grow_with_every_claim_of_a_shard,
            fencing_tokens::a_worker_paused_past_its_lease_is_refused_by_a_fenced_receiver,
            fencing_tokens::a_worker_whose_lease_ended_calls_no_further_receiver,
            fencing_tokens::a_flush_resumed_after_its_lease_delivers_nothing,
            batch::a_batch_receiver_gets_each_shard_in_order_one_message_at_a_time,
            batch::a_round_of_many_shards_is_delivered_in_two_wave_groups_each_in_order,
            batch::a_failure_in_the_middle_of_a_batch_holds_its_shard_and_no_other,
            batch::a_shard_mixing_batch_and_single_receivers_keeps_its_order,
            batch::a_batch_handler_that_answers_short_or_panics_loses_nothing,
            flush::a_claim_before_the_commit_is_neither_waited_for_nor_taken_by_a_drain,
            flush::a_request_that_rolls_back_after_its_claim_leaves_its_bucket_free,
            flush::a_flush_whose_completion_is_lost_is_delivered_again_once_its_lease_ends,
            flush::a_flush_whose_shard_is_held_leaves_it_to_the_background_at_once,
            flush::a_flush_waits_for_no_bucket_held_elsewhere_when_other_buckets_were_released,
            flush::a_flush_delivers_the_older_rows_of_its_shard_first,
            payload_version::a_payload_version_is_read_back_by_every_claim,
            payload_version::a_dead_letter_and_its_replay_keep_the_payload_version,
            payload_version::parked_shards_are_listed_and_counted_apart,
        );
    };
    (@tests $backend:expr; $($file:ident :: $test:ident),* $(,)?) => {
        mod conformance {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $test() {
                    let backend = $backend;
                    $crate::conformance::$file::$test(&backend).await;
                }
            )*
        }
    };
}
