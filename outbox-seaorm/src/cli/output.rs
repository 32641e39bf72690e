//! What the commands answer: serde types (the `--json` documents) that also
//! print as text.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

/// An outbox table: `region` or `control` (the core type, with serde and
/// `FromStr`).
pub use outbox_core::OutboxKind as Kind;

/// A count that says whether it is exact, at least, or estimated (the core
/// type: `12`, `≥ 10,000`, `~2.4M` as text; in JSON
/// `{"precision": "exact", "value": 12}`).
pub use outbox_core::Count;

/// A shard, or every shard of a scope when `identifier` is `None`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetView {
    /// The table.
    pub kind: Kind,
    /// The region (control outbox only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The scope's value.
    pub scope: i32,
    /// The scope's declared name (`null` for a scope this binary's
    /// registry does not declare).
    #[serde(default)]
    pub scope_name: Option<String>,
    /// The shard's identifier; `None`: every shard of the scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identifier: Option<i64>,
}

impl fmt::Display for TargetView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind)?;
        if let Some(region) = &self.region {
            write!(f, "[{region}]")?;
        }
        match &self.scope_name {
            Some(name) => write!(f, " {name}({})", self.scope)?,
            None => write!(f, " scope {}", self.scope)?,
        }
        match self.identifier {
            Some(identifier) => write!(f, "/{identifier}"),
            None => f.write_str(" (every shard)"),
        }
    }
}

/// A shard's failure state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateView {
    /// `backing_off`, `paused` or `quarantined`.
    pub status: outbox_core::ShardStatus,
    /// Its next attempt while it backs off; `null` while it waits for an
    /// operator.
    pub next_attempt: Option<DateTime<Utc>>,
    /// Failed attempts since its last success.
    pub attempts: u32,
    /// What failed last ("paused by an operator" while paused).
    pub last_error: Option<String>,
    /// When it failed last.
    pub failed_at: DateTime<Utc>,
}

impl fmt::Display for StateView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.status, self.next_attempt) {
            (outbox_core::ShardStatus::Paused, _) => f.write_str("paused")?,
            (outbox_core::ShardStatus::Quarantined, _) => {
                write!(f, "quarantined after {} attempts", self.attempts)?;
            }
            (outbox_core::ShardStatus::Parked, Some(at)) => {
                write!(f, "parked, next at {}", time(&at))?;
            }
            (_, Some(at)) => write!(f, "{} attempts, next at {}", self.attempts, time(&at))?,
            (_, None) => write!(f, "{} attempts", self.attempts)?,
        }
        if let Some(error) = &self.last_error {
            write!(f, ": {error}")?;
        }
        Ok(())
    }
}

/// A pending shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardView {
    /// Which.
    pub shard: TargetView,
    /// Rows pending: exact up to the drainer's count cap, else at least the
    /// cap.
    pub depth: Count,
    /// When its oldest pending row was written.
    pub oldest_date_added: DateTime<Utc>,
    /// When its next row is due; `null` while it waits for an operator.
    pub next_scheduled_for: Option<DateTime<Utc>>,
    /// Its failure state, if it failed (or is paused).
    pub state: Option<StateView>,
}

/// A shard with a failure state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailingView {
    /// Which.
    pub shard: TargetView,
    /// Its state.
    pub state: StateView,
}

/// `shards`: one snapshot (one transaction).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardsOutput {
    /// The table.
    pub kind: Kind,
    /// Rows pending: exact up to the drainer's count cap
    /// (`DrainConfig::count_cap`), above it estimated or at least the cap.
    pub pending: Count,
    /// Dead letters: exact up to the cap, else at least the cap.
    pub dead_letters: Count,
    /// The deepest shards, deepest first (of the shards holding the oldest
    /// rows, when there are more than the cap).
    pub shards: Vec<ShardView>,
    /// Shards that failed (backing off or quarantined), next attempt
    /// first.
    pub failing: Vec<FailingView>,
    /// Shards parked by an operator's pause.
    pub paused: Vec<FailingView>,
}

impl fmt::Display for ShardsOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} outbox: {} rows pending, {} dead letters",
            self.kind, self.pending, self.dead_letters
        )?;
        if !self.shards.is_empty() {
            writeln!(f, "deepest shards:")?;
            for shard in &self.shards {
                write!(
                    f,
                    "  {}: {} rows, oldest from {}",
                    shard.shard,
                    shard.depth,
                    time(&shard.oldest_date_added)
                )?;
                match &shard.state {
                    Some(state) => writeln!(f, " ({state})")?,
                    None => writeln!(f)?,
                }
            }
        }
        if !self.failing.is_empty() {
            writeln!(f, "failing shards:")?;
            for failing in &self.failing {
                writeln!(f, "  {}: {}", failing.shard, failing.state)?;
            }
        }
        if !self.paused.is_empty() {
            writeln!(f, "paused shards:")?;
            for paused in &self.paused {
                writeln!(f, "  {}: {}", paused.shard, paused.state)?;
            }
        }
        Ok(())
    }
}

/// A dead-lettered row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeadLetterView {
    /// Its id (kept when replayed).
    pub id: i64,
    /// Its message id (kept when replayed): what its receiver records.
    pub message_id: outbox_core::uuid::Uuid,
    /// Its shard.
    pub shard: TargetView,
    /// Its category's value.
    pub category: i32,
    /// Its category's declared name (`null` for a category this binary's
    /// registry does not declare).
    #[serde(default)]
    pub category_name: Option<String>,
    /// Its object.
    pub object_identifier: i64,
    /// Its payload.
    pub payload: Option<serde_json::Value>,
    /// Why it was dead-lettered.
    pub error: String,
    /// When it was written.
    pub date_added: DateTime<Utc>,
    /// When it was dead-lettered.
    pub dead_lettered_at: DateTime<Utc>,
}

/// `dead-letters list`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeadLettersOutput {
    /// The table.
    pub kind: Kind,
    /// Dead letters of the table, in all.
    pub total: u64,
    /// The oldest, up to `--limit`.
    pub dead_letters: Vec<DeadLetterView>,
}

impl fmt::Display for DeadLettersOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} outbox: {} dead letters{}",
            self.kind,
            self.total,
            if (self.dead_letters.len() as u64) < self.total {
                format!(", the oldest {} shown", self.dead_letters.len())
            } else {
                String::new()
            }
        )?;
        for dead in &self.dead_letters {
            let category = category_label(dead.category, dead.category_name.as_deref());
            writeln!(
                f,
                "  #{} (message {}) {} {category} object {}, dead since {}: {}",
                dead.id,
                dead.message_id,
                dead.shard,
                dead.object_identifier,
                time(&dead.dead_lettered_at),
                dead.error
            )?;
        }
        Ok(())
    }
}

/// What `dead-letters replay` or `discard` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeadLetterAction {
    /// Moved back into the outbox.
    Replayed,
    /// Deleted for good.
    Discarded,
}

/// `dead-letters replay` and `dead-letters discard`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLettersChanged {
    /// The table.
    pub kind: Kind,
    /// Replayed or discarded.
    pub action: DeadLetterAction,
    /// How many.
    pub count: u64,
    /// Their ids, in the order they were handled.
    pub ids: Vec<i64>,
}

impl fmt::Display for DeadLettersChanged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = match self.action {
            DeadLetterAction::Replayed => "replayed (due at once)",
            DeadLetterAction::Discarded => "discarded",
        };
        writeln!(f, "{} {} dead letters {verb}", self.kind, self.count)
    }
}

/// `pause`, `cull` or `resume`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ControlChange {
    /// A pause was set.
    Paused,
    /// A cull was set.
    Culled,
    /// The control was lifted.
    Resumed,
}

/// What `pause`, `cull` or `resume` did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlOutput {
    /// What happened.
    pub change: ControlChange,
    /// To what.
    pub target: TargetView,
    /// Why (pause and cull).
    pub reason: Option<String>,
}

impl fmt::Display for ControlOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = match self.change {
            ControlChange::Paused => "paused in every process",
            ControlChange::Culled => "culled in every process (rows dropped without delivery)",
            ControlChange::Resumed => "resumed",
        };
        write!(f, "{} {verb}", self.target)?;
        match &self.reason {
            Some(reason) => writeln!(f, ": {reason}"),
            None => writeln!(f),
        }
    }
}

/// What `retry` did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryOutput {
    /// The shard.
    pub shard: TargetView,
    /// Made due at once; `false`: a worker held its bucket the whole time,
    /// run `retry` again.
    pub released: bool,
}

impl fmt::Display for RetryOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.released {
            writeln!(f, "{} is due now", self.shard)
        } else {
            writeln!(
                f,
                "{} was held by a worker the whole time; run `retry` again",
                self.shard
            )
        }
    }
}

/// A delivery that failed during `drain` (its shard backs off).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureView {
    /// The shard.
    pub shard: TargetView,
    /// The row.
    pub id: i64,
    /// The category's value.
    pub category: i32,
    /// The category's declared name (`null` for a category this binary's
    /// registry does not declare).
    #[serde(default)]
    pub category_name: Option<String>,
    /// Moved to the dead-letter table by its scope's policy.
    pub dead_lettered: bool,
    /// What failed.
    pub error: String,
}

/// What `drain` did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DrainOutput {
    /// Drain rounds run (one per table and drainer each time round).
    pub rounds: u64,
    /// Receiver calls that succeeded.
    pub deliveries: u64,
    /// Rows deleted: delivered (coalesced ones included) or culled.
    pub rows_deleted: u64,
    /// Rows culled by a control.
    pub culled: u64,
    /// Rows moved to the dead-letter table.
    pub dead_lettered: u64,
    /// Failed deliveries, in all.
    pub failed: u64,
    /// The first failed deliveries (at most 100).
    pub failures: Vec<FailureView>,
    /// The most rows pending at once.
    pub peak_pending: u64,
    /// How long it took, in seconds.
    pub seconds: f64,
}

impl fmt::Display for DrainOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "outboxes empty after {:.1} s: {} deliveries, {} rows deleted ({} culled), {} dead-lettered, {} failed deliveries",
            self.seconds, self.deliveries, self.rows_deleted, self.culled, self.dead_lettered, self.failed
        )?;
        for failure in &self.failures {
            writeln!(
                f,
                "  failed: {} row {} ({}){}: {}",
                failure.shard,
                failure.id,
                category_label(failure.category, failure.category_name.as_deref()),
                if failure.dead_lettered {
                    ", dead-lettered"
                } else {
                    ""
                },
                failure.error
            )?;
        }
        Ok(())
    }
}

/// Where one table's backfill stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackfillTableStatus {
    /// The table.
    pub table: String,
    /// The cursor's lower bound (0 when done or not started).
    pub lower_bound_id: i64,
    /// The cursor's version, if a cursor exists.
    pub cursor_version: Option<u32>,
    /// The coded replication version.
    pub coded_version: u32,
    /// The version the backfill may advance to now (`None`: its option is
    /// unset and force mode is off).
    pub target_version: Option<u32>,
    /// Whether the backfill of the target version is complete.
    pub done: bool,
    /// Rows still to backfill for the target version.
    pub rows_remaining: u64,
}

impl From<crate::backfill::BackfillStatus> for BackfillTableStatus {
    fn from(status: crate::backfill::BackfillStatus) -> Self {
        Self {
            table: status.table.to_owned(),
            lower_bound_id: status.lower_bound_id,
            cursor_version: status.cursor_version,
            coded_version: status.coded_version,
            target_version: status.target_version,
            done: status.done,
            rows_remaining: status.rows_remaining,
        }
    }
}

/// `backfill status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackfillStatusOutput {
    /// Read in force mode.
    pub forced: bool,
    /// Per table, in backfill order.
    pub tables: Vec<BackfillTableStatus>,
}

impl fmt::Display for BackfillStatusOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for table in &self.tables {
            let target = match table.target_version {
                Some(version) => format!("version {version}"),
                None => "no target (option unset)".to_owned(),
            };
            let state = if table.done {
                "done".to_owned()
            } else if table.target_version.is_none() {
                "waiting".to_owned()
            } else {
                format!(
                    "{} rows remaining from id {}",
                    table.rows_remaining, table.lower_bound_id
                )
            };
            let cursor = match table.cursor_version {
                Some(version) => {
                    format!("cursor at id {} of version {version}", table.lower_bound_id)
                }
                None => "no cursor".to_owned(),
            };
            writeln!(
                f,
                "{}: coded version {}, {cursor}, {target}: {state}",
                table.table, table.coded_version
            )?;
        }
        Ok(())
    }
}

/// One table of `backfill run`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackfillTableRun {
    /// The table.
    pub table: String,
    /// Rows backfilled.
    pub rows: u64,
    /// Rows the status counted before the run.
    pub expected: u64,
}

/// `backfill run`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackfillRunOutput {
    /// In force mode.
    pub forced: bool,
    /// Rows backfilled, in all.
    pub backfilled: u64,
    /// Per table, in backfill order.
    pub tables: Vec<BackfillTableRun>,
}

impl fmt::Display for BackfillRunOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "backfilled {} rows{}",
            self.backfilled,
            if self.forced { " (force mode)" } else { "" }
        )?;
        for table in &self.tables {
            writeln!(f, "  {}: {} rows", table.table, table.rows)?;
        }
        Ok(())
    }
}

/// `audit`: the newest records of the operators' audit log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditOutput {
    /// Newest first.
    pub records: Vec<AuditLine>,
}

/// One operator action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditLine {
    /// Increasing with each record.
    pub id: i64,
    /// When.
    pub at: DateTime<Utc>,
    /// Who.
    pub actor: String,
    /// In which role (`operator`, `viewer`, `cli`).
    pub role: String,
    /// What.
    pub action: String,
    /// On what.
    pub target: Option<String>,
    /// The reason given.
    pub reason: Option<String>,
    /// `ok`, or what refused or failed it.
    pub outcome: String,
    /// What it did, or why it was refused.
    pub detail: Option<String>,
}

impl From<&outbox_core::audit::AuditRecord> for AuditLine {
    fn from(record: &outbox_core::audit::AuditRecord) -> Self {
        let entry = record.entry.clone();
        Self {
            id: record.id,
            at: entry.at,
            actor: entry.actor,
            role: entry.role,
            action: entry.action,
            target: entry.target,
            reason: entry.reason,
            outcome: entry.outcome,
            detail: entry.detail,
        }
    }
}

impl fmt::Display for AuditOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.records.is_empty() {
            return writeln!(f, "no operator action recorded");
        }
        for line in &self.records {
            write!(
                f,
                "{} {} ({}) {}",
                time(&line.at),
                line.actor,
                line.role,
                line.action
            )?;
            if let Some(target) = &line.target {
                write!(f, " {target}")?;
            }
            if let Some(reason) = &line.reason {
                write!(f, " (reason: {reason})")?;
            }
            write!(f, ": {}", line.outcome)?;
            if let Some(detail) = &line.detail {
                write!(f, ", {detail}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// What any command answered: `--json` prints the inner document as it is.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum CommandOutput {
    /// `shards`.
    Shards(ShardsOutput),
    /// `dead-letters list`.
    DeadLetters(DeadLettersOutput),
    /// `dead-letters replay|discard`.
    DeadLettersChanged(DeadLettersChanged),
    /// `pause`, `cull`, `resume`.
    Control(ControlOutput),
    /// `retry`.
    Retry(RetryOutput),
    /// `drain`.
    Drain(DrainOutput),
    /// `backfill status`.
    BackfillStatus(BackfillStatusOutput),
    /// `backfill run`.
    BackfillRun(BackfillRunOutput),
    /// `audit`.
    Audit(AuditOutput),
}

impl fmt::Display for CommandOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandOutput::Shards(output) => output.fmt(f),
            CommandOutput::DeadLetters(output) => output.fmt(f),
            CommandOutput::DeadLettersChanged(output) => output.fmt(f),
            CommandOutput::Control(output) => output.fmt(f),
            CommandOutput::Retry(output) => output.fmt(f),
            CommandOutput::Drain(output) => output.fmt(f),
            CommandOutput::BackfillStatus(output) => output.fmt(f),
            CommandOutput::BackfillRun(output) => output.fmt(f),
            CommandOutput::Audit(output) => output.fmt(f),
        }
    }
}

/// `OrganizationUpdate(1)`, as [`TargetView`] writes a scope, or
/// `category 9` for one the registry does not declare.
fn category_label(value: i32, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{name}({value})"),
        None => format!("category {value}"),
    }
}

fn time(at: &DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}
