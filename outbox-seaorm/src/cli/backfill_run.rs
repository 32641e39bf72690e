//! `backfill status` and `backfill run`.

use std::collections::HashMap;

use indicatif::ProgressBar;
use sea_orm::DatabaseConnection;

use crate::backfill::Backfill;

use super::error::CliError;
use super::output::{BackfillRunOutput, BackfillStatusOutput, BackfillTableRun};
use super::progress::Progress;

/// Where each table of `backfill` stands; with `force`, as a forced run
/// sees it (the coded versions are the targets).
///
/// # Errors
///
/// [`CliError::Database`].
#[tracing::instrument(name = "outbox.cli.backfill_status", skip_all, fields(force = force), err)]
pub async fn backfill_status(
    backfill: &Backfill,
    db: &DatabaseConnection,
    force: bool,
) -> Result<BackfillStatusOutput, CliError> {
    let backfill = mode(backfill, force);
    let tables = backfill.status(db).await?;
    Ok(BackfillStatusOutput {
        forced: backfill.is_forced(),
        tables: tables.into_iter().map(Into::into).collect(),
    })
}

/// Backfills every table of `backfill` to its target version (with
/// `force`, the coded one), without the per-minute budget, with a bar per
/// table on `progress` (its length: the rows the status counted first).
///
/// # Errors
///
/// [`CliError::Database`]; the batches committed before it stay, and a
/// second run goes on from the cursors.
#[tracing::instrument(name = "outbox.cli.backfill_run", skip_all, fields(force = force), err)]
pub async fn backfill_run(
    backfill: &Backfill,
    db: &DatabaseConnection,
    force: bool,
    progress: Progress,
) -> Result<BackfillRunOutput, CliError> {
    let backfill = mode(backfill, force);
    let statuses = backfill.status(db).await?;
    let expected: HashMap<&'static str, u64> = statuses
        .iter()
        .map(|status| (status.table, status.rows_remaining))
        .collect();
    let multi = progress.multi();
    let bars: HashMap<&'static str, ProgressBar> = statuses
        .iter()
        .map(|status| {
            let bar = multi.add(progress.bar(status.rows_remaining, status.table));
            (status.table, bar)
        })
        .collect();
    let report = backfill
        .run_to_completion(db, |table, rows| {
            if let Some(bar) = bars.get(table) {
                // Rows written since the status counted them.
                if bar.length().is_some_and(|length| rows > length) {
                    bar.set_length(rows);
                }
                bar.set_position(rows);
            }
        })
        .await;
    let report = match report {
        Ok(report) => report,
        Err(error) => {
            bars.values().for_each(ProgressBar::abandon);
            return Err(error.into());
        }
    };
    bars.values().for_each(ProgressBar::finish);
    Ok(BackfillRunOutput {
        forced: backfill.is_forced(),
        backfilled: report.backfilled,
        tables: report
            .tables
            .iter()
            .map(|(table, rows)| BackfillTableRun {
                table: (*table).to_owned(),
                rows: *rows,
                expected: expected.get(table).copied().unwrap_or(0),
            })
            .collect(),
    })
}

fn mode(backfill: &Backfill, force: bool) -> Backfill {
    let backfill = backfill.clone();
    if force {
        backfill.force(true)
    } else {
        backfill
    }
}
