//! The CLI's record in the operators' audit log: every command that
//! changes something (pause, cull, resume, retry, replay, discard, drain,
//! backfill run), as `cli:<user>`, with its outcome.

use outbox_core::audit::AuditEntry;
use outbox_core::{Category, Drainer, OutboxKind};

use super::command::{BackfillCommand, DeadLetterCommand, OutboxCommand, TargetArgs};
use super::error::CliError;
use super::output::CommandOutput;
use super::target::{scope_name, scope_value};

/// How long the audit log keeps a record (the admin API's default).
const RETENTION: std::time::Duration = outbox_core::audit::DEFAULT_RETENTION;

/// The name the CLI records by default: `cli:` and the user running it.
pub(super) fn default_actor() -> String {
    let user = ["USER", "LOGNAME", "USERNAME"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|user| !user.is_empty()))
        .unwrap_or_else(|| "unknown".to_owned());
    format!("cli:{user}")
}

/// `region scope OrganizationScope (0) shard 7 → us`: the scope by name and
/// number however it was given (as given when `C` does not declare it).
fn target_label<C: Category>(
    kind: OutboxKind,
    scope: &str,
    shard: Option<i64>,
    region: Option<&str>,
) -> String {
    let scope = scope_value::<C>(scope)
        .ok()
        .and_then(|value| Some(format!("{} ({value})", scope_name::<C>(value)?)))
        .unwrap_or_else(|| scope.to_owned());
    let mut label = format!("{kind} scope {scope}");
    if let Some(shard) = shard {
        label.push_str(&format!(" shard {shard}"));
    }
    if let Some(region) = region {
        label.push_str(&format!(" → {region}"));
    }
    label
}

fn control_label<C: Category>(target: &TargetArgs) -> String {
    target_label::<C>(
        target.kind,
        &target.scope,
        target.shard,
        target.region.as_deref(),
    )
}

/// What `command` changes, for its record: `None` for a read.
fn described<C: Category>(
    command: &OutboxCommand,
) -> Option<(&'static str, Option<String>, Option<String>)> {
    Some(match command {
        OutboxCommand::Shards(_)
        | OutboxCommand::DeadLetters(DeadLetterCommand::List(_))
        | OutboxCommand::Backfill(BackfillCommand::Status(_))
        | OutboxCommand::Audit(_) => return None,
        OutboxCommand::DeadLetters(
            DeadLetterCommand::Replay(which) | DeadLetterCommand::Discard(which),
        ) => {
            let action = match command {
                OutboxCommand::DeadLetters(DeadLetterCommand::Replay(_)) => "replay",
                _ => "discard",
            };
            let ids = if which.all {
                "all".to_owned()
            } else {
                let shown: Vec<String> = which.ids.iter().take(20).map(i64::to_string).collect();
                let more = if which.ids.len() > shown.len() {
                    ", …"
                } else {
                    ""
                };
                format!("{}{more}", shown.join(", "))
            };
            (
                action,
                Some(format!("{} dead letters {ids}", which.kind)),
                None,
            )
        }
        OutboxCommand::Pause(args) => (
            "pause",
            Some(control_label::<C>(&args.target)),
            args.reason.clone(),
        ),
        OutboxCommand::Cull(args) => (
            "cull",
            Some(control_label::<C>(&args.target)),
            args.reason.clone(),
        ),
        OutboxCommand::Resume(target) => ("resume", Some(control_label::<C>(target)), None),
        OutboxCommand::Retry(shard) => (
            "retry",
            Some(target_label::<C>(
                shard.kind,
                &shard.scope,
                Some(shard.shard),
                shard.region.as_deref(),
            )),
            None,
        ),
        OutboxCommand::Drain(_) => ("drain", None, None),
        OutboxCommand::Backfill(BackfillCommand::Run(_)) => ("backfill run", None, None),
    })
}

/// Records `command` by `actor` and how it ended, when it changes
/// something. A failure to record is logged: the command has run.
pub(super) async fn record<C: Category>(
    drainer: &Drainer<C>,
    actor: &str,
    command: &OutboxCommand,
    outcome: &Result<CommandOutput, CliError>,
) {
    let Some((action, target, reason)) = described::<C>(command) else {
        return;
    };
    let mut entry = AuditEntry::new(drainer.clock().now(), actor, "cli", action);
    entry.target = target;
    entry.reason = reason;
    match outcome {
        Ok(output) => {
            let text = output.to_string();
            entry.detail = text.lines().next().map(str::to_owned);
        }
        Err(error) => {
            entry.outcome = "error".to_owned();
            entry.detail = Some(error.to_string());
        }
    }
    if let Err(error) = drainer.operator().record(&entry, RETENTION).await {
        tracing::error!(%error, action, "the command could not be recorded in the outbox audit log");
    }
}
