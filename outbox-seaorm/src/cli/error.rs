//! Why a command failed.

use std::time::Duration;

use outbox_core::StoreError;

use super::output::Kind;

/// Why a command failed. Nothing was changed by a command that failed on
/// its input (every variant but `DrainTimedOut`, `Store`, `Database` and
/// `Output`, which may come after part of the work was committed).
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// `--scope` names no scope of this binary's registry.
    #[error("unknown scope `{given}`: this registry declares {known}")]
    UnknownScope {
        /// What was given.
        given: String,
        /// The scopes it declares, by name and value.
        known: String,
    },
    /// The control outbox needs `--region`.
    #[error("the control outbox needs `--region` (1 to 64 characters): its shards are per region")]
    RegionRequired,
    /// `--region` was given for the region outbox.
    #[error("`--region` names a region of the control outbox; the region outbox has none")]
    RegionNotAllowed,
    /// `resume` on a target without a control.
    #[error("no pause or cull is set on {target}; `shards` lists the paused shards")]
    UnknownControl {
        /// The target, as given.
        target: String,
    },
    /// `retry` on a shard that is not failing.
    #[error("{shard} is not failing, paused or quarantined: `shards` lists the failing shards")]
    ShardNotFailing {
        /// The shard, as given.
        shard: String,
    },
    /// Some ids are not dead letters of the table; nothing was done.
    #[error(
        "{ids:?} are not dead letters of the {kind} outbox; nothing was done \
         (`dead-letters list --kind {kind}` shows them)"
    )]
    UnknownDeadLetters {
        /// The table.
        kind: Kind,
        /// The ids that are not dead letters.
        ids: Vec<i64>,
    },
    /// Neither dead-letter ids nor `--all`, or too many ids.
    #[error("give 1 to {max} dead-letter ids, or `--all`")]
    DeadLetterIds {
        /// The most ids one command takes.
        max: u32,
    },
    /// `--limit` out of range.
    #[error("`--limit` must be between 1 and {max}")]
    InvalidLimit {
        /// The largest limit.
        max: u32,
    },
    /// `--reason` too long or with a NUL.
    #[error("`--reason` takes at most {max} characters, without NUL")]
    InvalidReason {
        /// The most characters.
        max: usize,
    },
    /// `backfill` on a CLI built without one.
    #[error(
        "no backfill is configured for this program: it registers no replicated \
         models (`OutboxCli::with_backfill`)"
    )]
    NoBackfill,
    /// `drain` ran out of time.
    #[error(
        "{pending} outbox rows were still pending after {timeout:?} ({paused} shards paused, \
         {quarantined} quarantined, {backing_off} backing off after failures): `shards` shows \
         them; resume or retry them, or run `drain` again with a longer `--timeout`"
    )]
    DrainTimedOut {
        /// Rows pending at the end.
        pending: u64,
        /// The time it had.
        timeout: Duration,
        /// Shards parked by a pause.
        paused: u64,
        /// Shards quarantined after a permanent error.
        quarantined: u64,
        /// Shards backing off after a failed delivery, or parked on a
        /// payload version their receiver does not know.
        backing_off: u64,
    },
    /// The outbox store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The database failed (backfill).
    #[error("database: {0}")]
    Database(#[from] sea_orm::DbErr),
    /// The output could not be written.
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

crate::error_debug::debug_with_message!(CliError {
    UnknownScope,
    RegionRequired,
    RegionNotAllowed,
    UnknownControl,
    ShardNotFailing,
    UnknownDeadLetters,
    DeadLetterIds,
    InvalidLimit,
    InvalidReason,
    NoBackfill,
    DrainTimedOut,
    Store,
    Database,
    Output
});
