//! The outbox context: which shards a unit of work wrote, so that they can be
//! flushed right after its transaction commits.
//!
//! The write API notes every row it writes into the *current* context (a
//! tokio task-local). After the commit, [`OutboxContext::flush`] drains each
//! noted shard up to the highest id written, synchronously. Rows written inside
//! [`deferred`] (or after [`OutboxContext::defer_flush`]) are left to the
//! background drain, like Sentry's `outbox_context(flush=False)`.
//!
//! `outbox-axum`'s layer opens a context per request; a background job opens
//! its own:
//!
//! ```
//! outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 } }
//! use outbox_core::{context, Drainer, MemoryStore, OutboxContext, Receivers, ShardKey};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let drainer = Drainer::new(store.clone(), Receivers::new().discard(OutboxCategory::OrgUpdate));
//! let shard = ShardKey::region(OutboxScope::OrgScope, 1);
//!
//! let ctx = OutboxContext::new();
//! ctx.scope(async {
//!     // begin; write the model and its outbox row; commit. Writing notes the row:
//!     let id = store.write(&shard, OutboxCategory::OrgUpdate, 1, None);
//!     OutboxContext::note(&shard, id);
//!     // A nested deferred scope: these rows wait for the background drain.
//!     context::deferred(async {
//!         let id = store.write(&ShardKey::region(OutboxScope::OrgScope, 2), OutboxCategory::OrgUpdate, 2, None);
//!         OutboxContext::note(&ShardKey::region(OutboxScope::OrgScope, 2), id);
//!     }).await;
//! }).await;
//!
//! let outcome = ctx.flush(&drainer).await;
//! assert!(outcome.errors.is_empty());
//! assert_eq!(outcome.report.deliveries, 1);
//! assert_eq!(ctx.deferred_kinds().len(), 1, "the deferred row still waits");
//! # });
//! ```
//!
//! Task-locals do not cross `tokio::spawn`: rows written from a spawned task
//! are not noted, and reach receivers through the background drain.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

pub use crate::drain::FlushOutcome;
use crate::drain::{Drainer, PreparedFlush};
use crate::registry::Category;
use crate::shard::{OutboxKind, ShardKey};

tokio::task_local! {
    static CURRENT: Frame;
}

#[derive(Clone)]
struct Frame {
    context: OutboxContext,
    flush: bool,
}

#[derive(Debug, Default)]
struct State {
    /// Highest id written per shard, to flush after commit.
    flush: BTreeMap<ShardKey, i64>,
    /// Kinds with rows left to the background drain.
    deferred: BTreeSet<OutboxKind>,
    flush_disabled: bool,
}

/// Rows written by one unit of work (a request, a job). Clones share state.
#[derive(Clone, Debug, Default)]
pub struct OutboxContext {
    state: Arc<Mutex<State>>,
}

impl OutboxContext {
    /// An empty context that flushes by default.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `work` with this context current: rows written inside are noted.
    pub async fn scope<F: Future>(&self, work: F) -> F::Output {
        let frame = Frame {
            context: self.clone(),
            flush: true,
        };
        CURRENT.scope(frame, work).await
    }

    /// The context of the running task, if any.
    pub fn current() -> Option<OutboxContext> {
        CURRENT.try_with(|frame| frame.context.clone()).ok()
    }

    /// Notes a written row in the current context (no-op outside one). The
    /// write API calls this; call it yourself only for rows you insert by
    /// other means.
    pub fn note(shard: &ShardKey, id: i64) {
        let _ = CURRENT.try_with(|frame| {
            let mut state = frame.context.lock();
            if frame.flush && !state.flush_disabled {
                let highest = state.flush.entry(shard.clone()).or_insert(id);
                *highest = (*highest).max(id);
            } else {
                state.deferred.insert(shard.kind());
            }
        });
    }

    /// Opts the whole unit of work out of the synchronous flush (`flush =
    /// false`): everything it wrote, before or after this call, is left to the
    /// background drain.
    pub fn defer_flush(&self) {
        let mut state = self.lock();
        state.flush_disabled = true;
        let kinds: Vec<OutboxKind> = state.flush.keys().map(ShardKey::kind).collect();
        state.deferred.extend(kinds);
        state.flush.clear();
    }

    /// Whether the synchronous flush was turned off.
    pub fn is_flush_deferred(&self) -> bool {
        self.lock().flush_disabled
    }

    /// The shards to flush, each with the highest id written.
    pub fn shards_to_flush(&self) -> Vec<(ShardKey, i64)> {
        self.lock()
            .flush
            .iter()
            .map(|(shard, id)| (shard.clone(), *id))
            .collect()
    }

    /// The kinds with rows left to the background drain (to wake it).
    pub fn deferred_kinds(&self) -> Vec<OutboxKind> {
        self.lock().deferred.iter().copied().collect()
    }

    /// Forgets every noted row (the transaction rolled back).
    pub fn clear(&self) {
        let mut state = self.lock();
        state.flush.clear();
        state.deferred.clear();
    }

    /// Flushes every noted shard up to the highest id written, one after the
    /// other, claiming each after the commit ([`Drainer::drain_shard`]).
    /// Call it after the commit, outside [`scope`](Self::scope). A failed
    /// shard is reported and its kind counted as deferred; the others still
    /// flush. To claim before the commit instead (no statement after it),
    /// use [`prepare_flush`](Self::prepare_flush).
    pub async fn flush<C: Category>(&self, drainer: &Drainer<C>) -> FlushOutcome {
        match self.prepare_flush(drainer) {
            Some(flush) => self.finish_flush(flush).await,
            None => FlushOutcome::default(),
        }
    }

    /// Takes the noted shards for a flush prepared now, before the commit:
    /// claim them with [`PreparedFlush::claim`] as the last
    /// statement of the transaction, then [`finish_flush`](Self::finish_flush)
    /// after it commits. `None` when the flush is turned off or nothing was
    /// written.
    pub fn prepare_flush<C: Category>(&self, drainer: &Drainer<C>) -> Option<PreparedFlush<C>> {
        let shards = {
            let mut state = self.lock();
            if state.flush_disabled {
                return None;
            }
            std::mem::take(&mut state.flush)
        };
        if shards.is_empty() {
            return None;
        }
        Some(drainer.prepare_flush(shards))
    }

    /// Delivers a prepared flush after the commit; the kinds of the shards
    /// it could not deliver count as deferred.
    pub async fn finish_flush<C: Category>(&self, flush: PreparedFlush<C>) -> FlushOutcome {
        let outcome = flush.deliver().await;
        let mut state = self.lock();
        for error in &outcome.errors {
            if let Some(shard) = error.shard() {
                state.deferred.insert(shard.kind());
            }
        }
        outcome
    }
}

/// Runs `work` so that the rows it writes are left to the background drain
/// (Sentry's nested `outbox_context(flush=False)`). Outside a context it just
/// runs `work`.
pub async fn deferred<F: Future>(work: F) -> F::Output {
    match CURRENT.try_with(Frame::clone) {
        Ok(frame) => {
            let frame = Frame {
                flush: false,
                ..frame
            };
            CURRENT.scope(frame, work).await
        }
        Err(_) => work.await,
    }
}
