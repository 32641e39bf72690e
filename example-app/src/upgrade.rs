//! `example-app upgrade`: the self-hosted upgrade. Runs the migrations of
//! every silo, then every backfill in force mode (the coded replication
//! versions, ignoring the options), then drains every outbox, with the
//! operator CLI's progress bars (`outbox_seaorm::cli`: a bar per backfilled
//! table, then one of rows left to deliver, on standard error when it is a
//! terminal), a line per table and a summary. Safe to run twice: a finished
//! backfill is done until the code bumps a version.

use std::io::Write;
use std::time::Duration;

use outbox_core::Drainer;
use outbox_seaorm::cli::{backfill_run, drain_until_empty, CliError, Progress};
use tokio::net::TcpListener;

use crate::registry::OutboxCategory;
use crate::silo::{self, backfill_for, Role, RunningSilo, SiloConfig, SiloError};

/// How long the upgrade's drain may take: 120 s.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(120);

/// What an upgrade did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpgradeReport {
    /// Rows backfilled per silo and table.
    pub backfilled: Vec<(String, String, u64)>,
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
    /// A backfill or a drain failed (a database error).
    #[error(transparent)]
    Cli(#[from] CliError),
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
    let bars = Progress::Terminal;
    let mut report = UpgradeReport::default();
    for (role, silo) in running {
        let silo_name = name(role);
        let run = backfill_run(&backfill_for(role), &silo.db, true, bars).await?;
        for table in run.tables {
            let _ = writeln!(
                progress,
                "backfill {silo_name}/{}: {} of {} rows, done",
                table.table, table.rows, table.expected
            );
            report
                .backfilled
                .push((silo_name.clone(), table.table, table.rows));
        }
    }
    // Drain everything; deliveries in one silo may write outboxes in another
    // (a membership brings its user along), so go round until all are empty.
    let drainers: Vec<Drainer<OutboxCategory>> = running
        .iter()
        .map(|(_, silo)| silo.drainer.clone())
        .collect();
    let drained = match drain_until_empty(&drainers, DRAIN_TIMEOUT, bars).await {
        Ok(drained) => drained,
        Err(CliError::DrainTimedOut {
            pending, timeout, ..
        }) => return Err(UpgradeError::NotDrained(pending, timeout)),
        Err(error) => return Err(error.into()),
    };
    report.delivered = drained.deliveries as usize;
    let _ = writeln!(
        progress,
        "drained in {:.1} s: {} rows delivered, done",
        drained.seconds, drained.deliveries
    );
    Ok(report)
}
