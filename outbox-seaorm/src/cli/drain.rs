//! `drain`: rounds until every outbox is empty.

use std::time::Duration;

use tokio::time::Instant;

use outbox_core::{Category, DrainReport, Drainer, OutboxKind};

use super::error::CliError;
use super::output::{DrainOutput, FailureView};
use super::progress::Progress;
use super::target::shard_view;

/// How long `drain` waits before the next round when the last one found
/// nothing due while rows were still pending (shards backing off, or
/// claimed by another process's worker): 100 ms.
const IDLE_PAUSE: Duration = Duration::from_millis(100);
/// Failed deliveries kept in the output: 100.
const FAILURES_SHOWN: usize = 100;

/// Runs drain rounds over both tables of every drainer until all of them are
/// empty: what `drain` does with its one drainer, and what an upgrade over
/// several silos does (deliveries in one silo may write outboxes in
/// another, so it goes round until all are empty). A bar on `progress` shows
/// the rows delivered against the most rows seen pending at once.
///
/// Failed deliveries do not stop it: their shards back off (rule 5) and are
/// tried again when due, while time remains.
///
/// # Errors
///
/// [`CliError::DrainTimedOut`] when rows are still pending after `timeout`
/// (with how many shards are paused, quarantined or backing off);
/// [`CliError::Store`] when a database fails.
#[tracing::instrument(name = "outbox.cli.drain", skip_all, fields(drainers = drainers.len(), timeout = ?timeout), err)]
pub async fn drain_until_empty<C: Category>(
    drainers: &[Drainer<C>],
    timeout: Duration,
    progress: Progress,
) -> Result<DrainOutput, CliError> {
    let started = Instant::now();
    let deadline = started + timeout;
    let mut output = DrainOutput::default();
    let mut pending = pending_rows(drainers).await?;
    output.peak_pending = pending;
    let bar = progress.bar(pending, "draining");
    while pending > 0 {
        if Instant::now() >= deadline {
            bar.abandon();
            return Err(timed_out(drainers, pending, timeout).await?);
        }
        let mut worked = false;
        for drainer in drainers {
            for kind in OutboxKind::ALL {
                let report = match drainer.drain_due(kind).await {
                    Ok(report) => report,
                    Err(error) => {
                        // Best effort: the claims of the failed round are
                        // ended now rather than at their lease's end.
                        let _ = drainer.release_abandoned().await;
                        bar.abandon();
                        return Err(error.into());
                    }
                };
                output.rounds += 1;
                worked |= !report.is_empty();
                absorb::<C>(&mut output, report);
            }
        }
        pending = pending_rows(drainers).await?;
        output.peak_pending = output.peak_pending.max(pending);
        bar.set_length(output.peak_pending);
        bar.set_position(output.peak_pending - pending);
        if !worked && pending > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(IDLE_PAUSE.min(left)).await;
        }
    }
    bar.finish();
    output.seconds = started.elapsed().as_secs_f64();
    Ok(output)
}

async fn pending_rows<C: Category>(drainers: &[Drainer<C>]) -> Result<u64, CliError> {
    let mut pending = 0;
    for drainer in drainers {
        for kind in OutboxKind::ALL {
            pending += drainer.view().pending_count(kind).await?;
        }
    }
    Ok(pending)
}

fn absorb<C: Category>(output: &mut DrainOutput, report: DrainReport) {
    output.deliveries += report.deliveries as u64;
    output.rows_deleted += report.rows_deleted;
    output.culled += report.culled as u64;
    output.dead_lettered += report.dead_lettered;
    output.failed += report.failures.len() as u64;
    let room = FAILURES_SHOWN.saturating_sub(output.failures.len());
    output.failures.extend(
        report
            .failures
            .iter()
            .take(room)
            .map(|failure| FailureView {
                shard: shard_view::<C>(&failure.shard),
                id: failure.id,
                category: failure.category,
                category_name: failure.category_name.map(str::to_owned),
                dead_lettered: failure.dead_lettered,
                error: failure.error.to_string(),
            }),
    );
}

async fn timed_out<C: Category>(
    drainers: &[Drainer<C>],
    pending: u64,
    timeout: Duration,
) -> Result<CliError, CliError> {
    let (mut paused, mut quarantined, mut backing_off) = (0, 0, 0);
    for drainer in drainers {
        for kind in OutboxKind::ALL {
            let backlog = drainer.view().backlog(kind).await?;
            paused += backlog.paused_shards;
            quarantined += backlog.quarantined_shards;
            // A parked shard is tried again at a time too.
            backing_off += backlog.failing_shards + backlog.parked_shards;
        }
    }
    Ok(CliError::DrainTimedOut {
        pending,
        timeout,
        paused,
        quarantined,
        backing_off,
    })
}
