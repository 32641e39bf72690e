//! Delivering shards in waves, for categories with a batch handler
//! ([`Receivers::on_batch`](crate::Receivers::on_batch)).
//!
//! A wave takes the next coalescing group of every shard it holds, calls
//! each category's batch handler once with all of that category's messages
//! (at most one per shard), the other categories' receivers one message
//! each (at most `concurrency` at once), and records every result before the
//! next wave: a shard never has two calls out at once, so its order holds
//! (rule 3) whatever the batch handler does inside a batch. A failed
//! message ends its own shard's run (backoff, quarantine) or dead-letters
//! it; the other shards go on with the next wave.
//!
//! A round of many shards (at least `WAVE_GROUPS × MIN_GROUP`) splits them
//! into groups whose waves run concurrently, each with its share of
//! `concurrency`: while one group's wave waits for its acknowledgements (a
//! JetStream publish, a webhook), the next wave of another is built and
//! sent. A shard is in one group only, so its calls stay one at a time.
//! It pays where a round holds deep shards and each wave waits on the
//! network (measured with the JetStream sink's batch receiver: `cargo bench
//! -p outbox-axum --bench jetstream`, deep shards; see
//! `docs/benchmarks.md`); one-message shards, one wave per round, gain
//! nothing from it.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::mpsc;

use super::call::{call_batch, call_one, Call};
use super::deliver::{ShardOutcome, ShardRun, Started};
use super::engine::Engine;
use super::lease::LeaseEnd;
use super::report::DeliveryError;
use crate::registry::Category;
use crate::shard::ShardKey;
use crate::store::ClaimedShard;

/// Groups a round of many shards is split into: 2.
const WAVE_GROUPS: usize = 2;
/// The fewest shards of a group: 32.
const MIN_GROUP: usize = 32;

/// Delivers `shards` wave by wave, sending each shard's outcome as soon as
/// it is decided.
pub(crate) async fn deliver_waves<C: Category>(
    drainer: Engine<C>,
    shards: Vec<ClaimedShard>,
    outcomes: mpsc::UnboundedSender<ShardOutcome>,
    lease: LeaseEnd,
    synchronous: bool,
    stack: Arc<Vec<ShardKey>>,
) {
    let mut runs = Vec::with_capacity(shards.len());
    for claimed in shards {
        match ShardRun::start(&drainer, claimed, synchronous, &stack) {
            Started::Run(run) => runs.push(*run),
            Started::Decided(outcome) => {
                if outcomes.send(outcome).is_err() {
                    return;
                }
            }
        }
    }
    let concurrency = drainer.config().concurrency.max(1);
    let groups = WAVE_GROUPS.min(runs.len() / MIN_GROUP).max(1);
    // Dealt out in claim order: the groups differ by one shard at most.
    let mut split: Vec<Vec<ShardRun<C>>> = (0..groups).map(|_| Vec::new()).collect();
    for (index, run) in runs.into_iter().enumerate() {
        split[index % groups].push(run);
    }
    let per_group = concurrency.div_ceil(groups);
    futures::future::join_all(
        split
            .into_iter()
            .map(|runs| run_waves(&drainer, runs, &outcomes, &lease, per_group, &stack)),
    )
    .await;
}

/// Delivers `runs` wave after wave until each has finished.
async fn run_waves<C: Category>(
    drainer: &Engine<C>,
    mut runs: Vec<ShardRun<C>>,
    outcomes: &mpsc::UnboundedSender<ShardOutcome>,
    lease: &LeaseEnd,
    concurrency: usize,
    stack: &Arc<Vec<ShardKey>>,
) {
    while !runs.is_empty() {
        let mut live = Vec::with_capacity(runs.len());
        let mut batches: HashMap<C, Vec<(usize, Call<C>)>> = HashMap::new();
        let mut singles: Vec<(usize, Call<C>)> = Vec::new();
        for mut run in runs {
            match run.next(drainer, lease) {
                None => {
                    if outcomes.send(run.finish(drainer)).is_err() {
                        return;
                    }
                }
                Some(Err(error)) => {
                    // Nothing to call: recorded now, the shard goes on (or
                    // ends) in the next wave.
                    run.record(drainer, Err(error));
                    live.push(run);
                }
                Some(Ok(call)) => {
                    let index = live.len();
                    if call.is_batch() {
                        batches
                            .entry(call.category)
                            .or_default()
                            .push((index, call));
                    } else {
                        singles.push((index, call));
                    }
                    live.push(run);
                }
            }
        }
        runs = live;
        if batches.is_empty() && singles.is_empty() {
            continue;
        }
        let results = call_wave(drainer, batches, singles, concurrency, stack).await;
        for (index, result) in results {
            runs[index].record(drainer, result);
        }
    }
}

/// Makes one wave's calls: a batch per category, the single calls at most
/// `concurrency` at once, all concurrently. Results by run index.
async fn call_wave<C: Category>(
    drainer: &Engine<C>,
    batches: HashMap<C, Vec<(usize, Call<C>)>>,
    singles: Vec<(usize, Call<C>)>,
    concurrency: usize,
    stack: &Arc<Vec<ShardKey>>,
) -> Vec<(usize, Result<C, DeliveryError>)> {
    let batch_calls = batches.into_values().map(|entries| {
        let (indexes, calls): (Vec<usize>, Vec<Call<C>>) = entries.into_iter().unzip();
        let handler = calls[0].handler.clone();
        // Every shard of the batch is being delivered on this task.
        let stack = Arc::new({
            let mut stack = Vec::clone(stack);
            stack.extend(calls.iter().map(|call| call.message.shard.clone()));
            stack
        });
        async move {
            let results = call_batch(drainer, handler, calls, stack).await;
            indexes.into_iter().zip(results).collect::<Vec<_>>()
        }
    });
    let single_calls = futures::stream::iter(singles)
        .map(|(index, call)| async move { (index, call_one(drainer, call).await) })
        .buffer_unordered(concurrency)
        .collect::<Vec<_>>();
    let (batched, single) = futures::join!(futures::future::join_all(batch_calls), single_calls);
    batched.into_iter().flatten().chain(single).collect()
}
