//! An embeddable command line for operators (feature `cli`), in the manner
//! of `sea_orm_migration::cli`: the same reads and actions as the admin
//! API of `outbox-axum`, from a terminal.
//!
//! | command | what it does |
//! |---|---|
//! | `shards [--kind region\|control] [--limit N]` | rows pending, dead letters, the deepest shards and the failing ones with attempts, next attempt and last error, read in one transaction |
//! | `dead-letters list [--kind K] [--limit N]` | dead letters, oldest first |
//! | `dead-letters replay --kind K (IDS... \| --all)` | back into the outbox, due at once; every id must be a dead letter of the table, or nothing is done; `--all` pages through them |
//! | `dead-letters discard --kind K (IDS... \| --all)` | deleted for good, the same way |
//! | `pause --kind K --scope S [--shard ID] [--region R] [--reason ...]` | nothing of the shard (or the scope) delivered or deleted, in every process, until `resume` |
//! | `cull ...` (the same target) | its rows deleted without delivery while the control holds |
//! | `resume --kind K --scope S [--shard ID] [--region R]` | lifts the control; parked shards are due at once |
//! | `retry --kind K --scope S --shard ID [--region R]` | a failing or quarantined shard is due now |
//! | `drain [--timeout SECS]` | drain rounds until both outboxes are empty (a progress bar of rows left), or fail when time runs out |
//! | `backfill status [--force]`, `backfill run [--force]` | where each replicated table's backfill stands; run them to completion (a bar per table) |
//!
//! `--scope` takes a scope's name, as the registry declares it, or its
//! value. `--json` (anywhere on the line) prints one JSON document per
//! command, of the serde types in [`output`], and hides progress bars;
//! without it the answer is text and the bars are drawn on standard error
//! when it is a terminal. Bad input is refused with a [`CliError`] before
//! anything changes.
//!
//! # Mounting it
//!
//! Embed [`OutboxArgs`] in your own clap parser, build an [`OutboxCli`] from
//! the silo's [`Drainer`](outbox_core::Drainer) (the same receivers as the
//! server: `drain` delivers) and, if it has replicated models, its
//! [`Backfill`](crate::backfill::Backfill) and database; then
//! [`OutboxCli::run`] writes the answer where you say. [`run_cli`] does all
//! of it for a binary that is nothing but this CLI.
//!
//! ```no_run
//! outbox_core::registry! {
//!     OrganizationScope = 0 (shard_field = "organization_id") {
//!         OrganizationUpdate = 1,
//!     }
//! }
//! use clap::Parser;
//! use outbox_core::{Drainer, Receivers};
//! use outbox_seaorm::backfill::Backfill;
//! use outbox_seaorm::cli::{OutboxArgs, OutboxCli};
//! use outbox_seaorm::SeaOrmStore;
//!
//! #[derive(Parser)]
//! enum Command {
//!     /// Serve the app.
//!     Serve,
//!     /// Operate the outbox.
//!     Outbox(OutboxArgs),
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let db = sea_orm::Database::connect("sqlite://app.sqlite?mode=rwc").await?;
//! let receivers = Receivers::new().discard(OutboxCategory::OrganizationUpdate);
//! match Command::parse() {
//!     Command::Serve => { /* ... */ }
//!     Command::Outbox(args) => {
//!         // e.g. `app outbox shards --kind region --json`
//!         let drainer = Drainer::new(SeaOrmStore::new(db.clone())?, receivers);
//!         let cli = OutboxCli::new(drainer).with_backfill(Backfill::new(), db);
//!         cli.run(&args, &mut std::io::stdout()).await?;
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! The building blocks are public too: [`drain_until_empty`] drains several
//! silos' drainers at once (deliveries in one may write outboxes in
//! another), [`backfill_run`] and [`backfill_status`] work on any
//! `Backfill`, each with [`Progress`] bars.

mod audit;
mod backfill_run;
mod command;
mod drain;
mod error;
mod outbox_cli;
pub mod output;
mod progress;
mod standalone;
mod target;

pub use backfill_run::{backfill_run, backfill_status};
pub use command::{
    AuditArgs, BackfillArgs, BackfillCommand, ControlArgs, DeadLetterCommand, DeadLetterIds,
    DrainArgs, ListArgs, OutboxArgs, OutboxCommand, ShardArgs, TargetArgs,
    DEFAULT_DRAIN_TIMEOUT_SECS, DEFAULT_LIMIT, MAX_LIMIT, REASON_MAX,
};
pub use drain::drain_until_empty;
pub use error::CliError;
pub use outbox_cli::OutboxCli;
pub use output::{CommandOutput, Kind};
pub use progress::Progress;
pub use standalone::{run_cli, run_cli_from, StandaloneCli};
