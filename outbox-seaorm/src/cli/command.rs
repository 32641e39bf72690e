//! The clap tree: what an app mounts in its own parser.

use clap::{Args, Subcommand};

use super::output::Kind;

/// Default `--limit` of `shards` and `dead-letters list`: 100.
pub const DEFAULT_LIMIT: u32 = 100;
/// The largest `--limit`, and the most dead-letter ids one command takes:
/// 10,000.
pub const MAX_LIMIT: u32 = 10_000;
/// Default `drain --timeout`, in seconds: 60.
pub const DEFAULT_DRAIN_TIMEOUT_SECS: u64 = 60;
/// The longest `--reason`, in characters: 1,000.
pub const REASON_MAX: usize = 1_000;

/// `--json` and an [`OutboxCommand`]: what an app mounts, as a variant of
/// its own subcommand enum (`Outbox(OutboxArgs)`) or flattened into its
/// parser. `--json` is global: it may follow the subcommand.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct OutboxArgs {
    /// Print one JSON document instead of text, and no progress bars.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: OutboxCommand,
}

/// The outbox commands.
#[derive(Clone, Debug, PartialEq, Eq, Subcommand)]
pub enum OutboxCommand {
    /// Rows pending, dead letters, the deepest shards and the failing ones
    /// (attempts, next attempt, last error), read in one transaction.
    Shards(ListArgs),
    /// Dead-lettered rows: list, replay (back into the outbox), discard.
    #[command(subcommand)]
    DeadLetters(DeadLetterCommand),
    /// Pause a shard, or a whole scope, in every process: nothing of it is
    /// delivered or deleted until `resume`.
    Pause(ControlArgs),
    /// Cull a shard, or a whole scope, in every process: its rows are
    /// deleted without delivery for as long as the control holds (`resume`
    /// lifts it).
    Cull(ControlArgs),
    /// Lift the pause or cull of a target; the shards a pause parked are due
    /// at once.
    Resume(TargetArgs),
    /// Make a failing, quarantined or parked shard due now (after a fix),
    /// instead of at the end of its backoff.
    Retry(ShardArgs),
    /// Run drain rounds over both outboxes until they are empty, or fail
    /// when the time runs out.
    Drain(DrainArgs),
    /// Backfills of replicated models: where they stand, or run them to
    /// completion.
    #[command(subcommand)]
    Backfill(BackfillCommand),
    /// The operators' audit log, newest first: who paused, culled,
    /// resumed, retried, replayed or discarded what, when, why, and how it
    /// ended (through the admin API, its dashboard or this CLI).
    Audit(AuditArgs),
}

/// `--limit` of `audit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Args)]
pub struct AuditArgs {
    /// How many records to show, 1 to 10,000.
    #[arg(long, default_value_t = DEFAULT_LIMIT,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_LIMIT)))]
    pub limit: u32,
}

/// `--kind` and `--limit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Args)]
pub struct ListArgs {
    /// The outbox table.
    #[arg(long, default_value_t = Kind::Region)]
    pub kind: Kind,
    /// How many shards or rows to show, 1 to 10,000.
    #[arg(long, default_value_t = DEFAULT_LIMIT,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_LIMIT)))]
    pub limit: u32,
}

impl Default for ListArgs {
    fn default() -> Self {
        Self {
            kind: Kind::Region,
            limit: DEFAULT_LIMIT,
        }
    }
}

/// `dead-letters list|replay|discard`.
#[derive(Clone, Debug, PartialEq, Eq, Subcommand)]
pub enum DeadLetterCommand {
    /// The dead letters of a table, oldest first.
    List(ListArgs),
    /// Move dead letters back into the outbox (same ids, due at once) for
    /// another try after a fix.
    Replay(DeadLetterIds),
    /// Delete dead letters for good.
    Discard(DeadLetterIds),
}

/// Which dead letters: ids, or `--all`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct DeadLetterIds {
    /// The outbox table.
    #[arg(long)]
    pub kind: Kind,
    /// The dead letters' ids (as `dead-letters list` shows them); all of
    /// them must be dead letters of the table, or nothing is done.
    #[arg(required_unless_present = "all", num_args = 1..)]
    pub ids: Vec<i64>,
    /// Every dead letter of the table, page by page.
    #[arg(long, conflicts_with = "ids")]
    pub all: bool,
}

/// What a control applies to: one shard with `--shard`, else every shard of
/// the scope.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct TargetArgs {
    /// The outbox table.
    #[arg(long)]
    pub kind: Kind,
    /// The scope, by name (as the registry declares it) or value.
    #[arg(long)]
    pub scope: String,
    /// The shard's identifier; without it, every shard of the scope.
    #[arg(long)]
    pub shard: Option<i64>,
    /// The region: required for the control outbox, refused for the region
    /// outbox.
    #[arg(long)]
    pub region: Option<String>,
}

/// `pause` and `cull`: a target and why.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct ControlArgs {
    /// What.
    #[command(flatten)]
    pub target: TargetArgs,
    /// Why, for the next operator (at most 1,000 characters).
    #[arg(long)]
    pub reason: Option<String>,
}

/// One shard.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct ShardArgs {
    /// The outbox table.
    #[arg(long)]
    pub kind: Kind,
    /// The scope, by name (as the registry declares it) or value.
    #[arg(long)]
    pub scope: String,
    /// The shard's identifier.
    #[arg(long)]
    pub shard: i64,
    /// The region: required for the control outbox, refused for the region
    /// outbox.
    #[arg(long)]
    pub region: Option<String>,
}

/// `drain`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Args)]
pub struct DrainArgs {
    /// Give up (and fail) when rows are still pending after this many
    /// seconds.
    #[arg(long, default_value_t = DEFAULT_DRAIN_TIMEOUT_SECS)]
    pub timeout: u64,
}

impl Default for DrainArgs {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_DRAIN_TIMEOUT_SECS,
        }
    }
}

/// `backfill status|run`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Subcommand)]
pub enum BackfillCommand {
    /// Per table: cursor, target version, rows remaining.
    Status(BackfillArgs),
    /// Backfill every table to its target version, without the per-minute
    /// budget.
    Run(BackfillArgs),
}

/// `--force`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Args)]
pub struct BackfillArgs {
    /// Force mode: target the coded replication versions, ignoring the
    /// runtime options (a self-hosted upgrade).
    #[arg(long)]
    pub force: bool,
}
