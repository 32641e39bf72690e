//! [`run_cli`]: a whole binary's `main`.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use outbox_core::Category;

use super::command::OutboxArgs;
use super::outbox_cli::OutboxCli;

/// The parser of a binary that is nothing but the outbox commands.
#[derive(Clone, Debug, Parser)]
#[command(
    about = "Operate a transactional outbox: shards, dead letters, controls, drain, backfill"
)]
pub struct StandaloneCli {
    /// The command and `--json`.
    #[command(flatten)]
    pub outbox: OutboxArgs,
}

/// Parses the process's arguments as an [`OutboxArgs`] and runs it,
/// answering on standard output; errors go to standard error, with exit
/// code 1 (2 for a usage error, as clap does). For a binary that is only
/// the outbox CLI, in the manner of `sea_orm_migration::cli::run_cli`:
///
/// ```no_run
/// # outbox_core::registry! { OrganizationScope = 0 { OrganizationUpdate = 1 } }
/// # async fn run(drainer: outbox_core::Drainer<OutboxCategory>) -> std::process::ExitCode {
/// outbox_seaorm::cli::run_cli(&outbox_seaorm::cli::OutboxCli::new(drainer)).await
/// # }
/// ```
pub async fn run_cli<C: Category>(cli: &OutboxCli<C>) -> ExitCode {
    run_cli_from(
        cli,
        std::env::args_os(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    )
    .await
}

/// [`run_cli`] with given arguments (the first is the program's name) and
/// writers.
pub async fn run_cli_from<C, I, T>(
    cli: &OutboxCli<C>,
    args: I,
    out: &mut (dyn Write + Send),
    err: &mut (dyn Write + Send),
) -> ExitCode
where
    C: Category,
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let parsed = match StandaloneCli::try_parse_from(args) {
        Ok(parsed) => parsed,
        Err(error) => {
            return if error.use_stderr() {
                let _ = write!(err, "{}", error.render());
                ExitCode::from(2)
            } else {
                // --help, --version.
                let _ = write!(out, "{}", error.render());
                ExitCode::SUCCESS
            };
        }
    };
    match cli.run(&parsed.outbox, out).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let _ = writeln!(err, "error: {error}");
            ExitCode::FAILURE
        }
    }
}
