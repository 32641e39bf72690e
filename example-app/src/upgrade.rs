//! `example-app upgrade`: the self-hosted upgrade. Runs the migrations of
//! every silo, then every backfill in force mode (the coded replication
//! versions, ignoring the options), then drains every outbox, with progress on
//! standard error and a summary at the end. Safe to run twice: a finished
//! backfill is done until the code bumps a version.

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use outbox_core::OutboxKind;
use tokio::net::TcpListener;

use crate::silo::{self, backfill_for, Role, RunningSilo, SiloConfig, SiloError};

/// What an upgrade did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpgradeReport {
    /// Rows backfilled per silo and table.
    pub backfilled: Vec<(String, &'static str, u64)>,
    /// Outbox messages the upgrade's own drain rounds delivered. The silos'
    /// background workers run meanwhile and deliver some too (as many as all
    /// of them, when they are quicker), so this is a lower bound; the upgrade
    /// ends when every outbox is empty, whoever delivered.
    pub delivered: usize,
}

impl UpgradeReport {
    /// Rows backfilled in all.
    pub fn total_backfilled(&self) -> u64 {
        self.backfilled.iter().map(|(_, _, rows)| rows).sum()
    }
}

/// Why an upgrade stopped.
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    /// A silo did not start.
    #[error(transparent)]
    Silo(#[from] SiloError),
    /// A backfill or a drain failed.
    #[error("database: {0}")]
    Database(#[from] sea_orm::DbErr),
    /// The store failed while draining.
    #[error(transparent)]
    Store(#[from] outbox_core::StoreError),
    /// Outbox rows were still pending when the time ran out (a silo
    /// unreachable?); run the upgrade again once it is back.
    #[error("{0} outbox rows were still pending after {1:?}; run `upgrade` again once every silo is reachable")]
    NotDrained(u64, Duration),
}

fn name(role: &Role) -> String {
    match role {
        Role::Control => "control".to_owned(),
        Role::Region(name) => name.clone(),
    }
}

/// Upgrades the silos of `configs` (each served on its listener while the
/// upgrade runs, so that cross-silo deliveries can happen).
///
/// # Errors
///
/// [`UpgradeError`]; what was committed before the error stays, and running
/// the upgrade again continues from the cursors.
pub async fn run(
    configs: Vec<(SiloConfig, TcpListener)>,
    progress: &mut (dyn Write + Send),
) -> Result<UpgradeReport, UpgradeError> {
    let mut running: Vec<(Role, RunningSilo)> = Vec::new();
    for (config, listener) in configs {
        let role = config.role.clone();
        let silo = silo::start(config, listener).await?;
        let _ = writeln!(progress, "migrated {}", name(&role));
        running.push((role, silo));
    }
    let result = upgrade(&running, progress).await;
    for (_, silo) in running {
        let _ = silo.shutdown().await;
    }
    let report = result?;
    let _ = writeln!(
        progress,
        "upgrade done: {} rows backfilled ({}), {} outbox messages delivered",
        report.total_backfilled(),
        report
            .backfilled
            .iter()
            .map(|(silo, table, rows)| format!("{silo}/{table}: {rows}"))
            .collect::<Vec<_>>()
            .join(", "),
        report.delivered
    );
    Ok(report)
}

async fn upgrade(
    running: &[(Role, RunningSilo)],
    progress: &mut (dyn Write + Send),
) -> Result<UpgradeReport, UpgradeError> {
    let mut report = UpgradeReport::default();
    for (role, silo) in running {
        let backfill = backfill_for(role).force(true);
        let silo_name = name(role);
        let remaining: HashMap<&str, u64> = backfill
            .status(&silo.db)
            .await?
            .into_iter()
            .map(|status| (status.table, status.rows_remaining))
            .collect();
        // One line per table: its bar moves while it runs, and the line is
        // finished when the next table starts.
        let mut finished: Vec<&'static str> = Vec::new();
        let mut current: Option<(&'static str, u64)> = None;
        let totals = backfill
            .run_to_completion(&silo.db, |table, rows| {
                if let Some((previous, done)) = current.filter(|(t, _)| *t != table) {
                    let _ = writeln!(
                        progress,
                        "\rbackfill {silo_name}/{previous}: {} rows, done",
                        bar(done, done)
                    );
                    finished.push(previous);
                }
                current = Some((table, rows));
                let total = remaining.get(table).copied().unwrap_or(rows);
                let _ = write!(
                    progress,
                    "\rbackfill {silo_name}/{table}: {}",
                    bar(rows, total)
                );
                let _ = progress.flush();
            })
            .await?;
        for (table, rows) in totals.tables {
            if !finished.contains(&table) {
                let _ = writeln!(
                    progress,
                    "\rbackfill {silo_name}/{table}: {} rows, done",
                    bar(rows, rows)
                );
            }
            report.backfilled.push((silo_name.clone(), table, rows));
        }
    }
    // Drain everything; deliveries in one silo may write outboxes in another
    // (a membership brings its user along), so go round until all are empty.
    let limit = Duration::from_secs(120);
    let started = Instant::now();
    let mut peak = 0;
    loop {
        let mut pending = 0;
        for (_, silo) in running {
            for kind in OutboxKind::ALL {
                let round = silo.drainer.drain_due(kind).await?;
                report.delivered += round.deliveries;
                pending += silo.drainer.admin().pending_count(kind).await?;
            }
        }
        // Deliveries may write more rows (a membership brings its user):
        // the bar's total is the most seen pending at once.
        peak = peak.max(pending);
        let _ = write!(
            progress,
            "\rdraining: {} rows delivered",
            bar(peak - pending, peak)
        );
        let _ = progress.flush();
        if pending == 0 {
            let _ = writeln!(progress, ", done");
            return Ok(report);
        }
        if started.elapsed() > limit {
            let _ = writeln!(progress);
            return Err(UpgradeError::NotDrained(pending, limit));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A text progress bar: `[###############...............]  50%    500/1000`.
fn bar(done: u64, total: u64) -> String {
    const WIDTH: u64 = 30;
    let total = total.max(done);
    let (filled, percent) = match total {
        0 => (WIDTH, 100),
        _ => (done * WIDTH / total, done * 100 / total),
    };
    format!(
        "[{}{}] {percent:>3}% {done:>7}/{total}",
        "#".repeat(filled as usize),
        ".".repeat((WIDTH - filled) as usize)
    )
}

#[cfg(test)]
mod tests {
    use super::bar;

    #[test]
    fn the_bar_fills_in_proportion_and_never_overflows() {
        assert_eq!(
            bar(0, 10),
            "[..............................]   0%       0/10"
        );
        assert_eq!(
            bar(5, 10),
            "[###############...............]  50%       5/10"
        );
        assert_eq!(
            bar(10, 10),
            "[##############################] 100%      10/10"
        );
        // More done than the estimate (rows added meanwhile): full, not past it.
        assert_eq!(
            bar(12, 10),
            "[##############################] 100%      12/12"
        );
        assert_eq!(bar(0, 0), "[##############################] 100%       0/0");
    }
}
