//! [`OutboxCli`]: a drainer (and a backfill) and the commands run on them.

use std::collections::HashSet;
use std::io::Write;
use std::time::Duration;

use sea_orm::DatabaseConnection;

use outbox_core::{Category, ControlTarget, Drainer, OutboxKind};

use crate::backfill::Backfill;

use super::backfill_run::{backfill_run, backfill_status};
use super::command::{
    BackfillCommand, ControlArgs, DeadLetterCommand, DeadLetterIds, ListArgs, OutboxArgs,
    OutboxCommand, ShardArgs, TargetArgs, MAX_LIMIT, REASON_MAX,
};
use super::drain::drain_until_empty;
use super::error::CliError;
use super::output::{
    AuditLine, AuditOutput, CommandOutput, ControlChange, ControlOutput, DeadLetterAction,
    DeadLetterView, DeadLettersChanged, DeadLettersOutput, FailingView, RetryOutput, ShardView,
    ShardsOutput, StateView,
};
use super::progress::Progress;
use super::target::{category_name, control_target, shard_key, shard_view, target_view};

/// Dead letters read, replayed or discarded at a time by `--all`: 1,000.
const PAGE: usize = 1_000;

/// The outbox commands over one silo's drainer, and its backfill if it has
/// one. See the [module documentation](super) for an example.
pub struct OutboxCli<C: Category> {
    drainer: Drainer<C>,
    backfill: Option<(Backfill, DatabaseConnection)>,
    progress: Option<Progress>,
    /// Who the audit log says ran the commands.
    actor: String,
}

impl<C: Category> std::fmt::Debug for OutboxCli<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxCli")
            .field("drainer", &self.drainer)
            .field("backfill", &self.backfill.as_ref().map(|(b, _)| b))
            .field("progress", &self.progress)
            .field("actor", &self.actor)
            .finish()
    }
}

impl<C: Category> OutboxCli<C> {
    /// The commands over `drainer`'s store and receivers (`drain` delivers
    /// through them). Without [`with_backfill`](Self::with_backfill),
    /// `backfill` answers [`CliError::NoBackfill`].
    pub fn new(drainer: Drainer<C>) -> Self {
        Self {
            drainer,
            backfill: None,
            progress: None,
            actor: super::audit::default_actor(),
        }
    }

    /// Who the operators' audit log says ran the commands that change
    /// something (default `cli:` and the `USER` running it).
    pub fn with_actor(mut self, actor: impl Into<String>) -> Self {
        self.actor = actor.into();
        self
    }

    /// Adds the backfill of the replicated models and the database they
    /// live in, for `backfill status|run`.
    pub fn with_backfill(mut self, backfill: Backfill, db: DatabaseConnection) -> Self {
        self.backfill = Some((backfill, db));
        self
    }

    /// Where progress bars go. Default: standard error when it is a
    /// terminal, nowhere with `--json` ([`Progress::for_output`]).
    pub fn with_progress(mut self, progress: Progress) -> Self {
        self.progress = Some(progress);
        self
    }

    /// The drainer.
    pub fn drainer(&self) -> &Drainer<C> {
        &self.drainer
    }

    /// Runs `args` and writes its answer to `out`: text, or with `--json`
    /// one JSON document (the serde types of [`super::output`]) and a line
    /// break.
    ///
    /// # Errors
    ///
    /// [`CliError`]; nothing is written then.
    pub async fn run(
        &self,
        args: &OutboxArgs,
        out: &mut (dyn Write + Send),
    ) -> Result<(), CliError> {
        let progress = self
            .progress
            .unwrap_or_else(|| Progress::for_output(args.json));
        let output = self.execute(&args.command, progress).await?;
        if args.json {
            serde_json::to_writer_pretty(&mut *out, &output).map_err(std::io::Error::from)?;
            writeln!(out)?;
        } else {
            write!(out, "{output}")?;
        }
        out.flush()?;
        Ok(())
    }

    /// Runs `command`, with progress bars on `progress`, and returns its
    /// answer. A command that changes something is recorded in the
    /// operators' audit log with how it ended (see
    /// [`outbox_core::audit`]).
    ///
    /// # Errors
    ///
    /// [`CliError`].
    pub async fn execute(
        &self,
        command: &OutboxCommand,
        progress: Progress,
    ) -> Result<CommandOutput, CliError> {
        let outcome = self.run_command(command, progress).await;
        super::audit::record(&self.drainer, &self.actor, command, &outcome).await;
        outcome
    }

    async fn run_command(
        &self,
        command: &OutboxCommand,
        progress: Progress,
    ) -> Result<CommandOutput, CliError> {
        Ok(match command {
            OutboxCommand::Shards(list) => CommandOutput::Shards(self.shards(*list).await?),
            OutboxCommand::DeadLetters(DeadLetterCommand::List(list)) => {
                CommandOutput::DeadLetters(self.dead_letters(*list).await?)
            }
            OutboxCommand::DeadLetters(DeadLetterCommand::Replay(which)) => {
                CommandOutput::DeadLettersChanged(
                    self.change_dead_letters(which, DeadLetterAction::Replayed, progress)
                        .await?,
                )
            }
            OutboxCommand::DeadLetters(DeadLetterCommand::Discard(which)) => {
                CommandOutput::DeadLettersChanged(
                    self.change_dead_letters(which, DeadLetterAction::Discarded, progress)
                        .await?,
                )
            }
            OutboxCommand::Pause(args) => {
                CommandOutput::Control(self.set_control(args, ControlChange::Paused).await?)
            }
            OutboxCommand::Cull(args) => {
                CommandOutput::Control(self.set_control(args, ControlChange::Culled).await?)
            }
            OutboxCommand::Resume(target) => CommandOutput::Control(self.resume(target).await?),
            OutboxCommand::Retry(shard) => CommandOutput::Retry(self.retry(shard).await?),
            OutboxCommand::Drain(drain) => CommandOutput::Drain(
                drain_until_empty(
                    std::slice::from_ref(&self.drainer),
                    Duration::from_secs(drain.timeout),
                    progress,
                )
                .await?,
            ),
            OutboxCommand::Backfill(BackfillCommand::Status(args)) => {
                let (backfill, db) = self.backfill()?;
                CommandOutput::BackfillStatus(backfill_status(backfill, db, args.force).await?)
            }
            OutboxCommand::Backfill(BackfillCommand::Run(args)) => {
                let (backfill, db) = self.backfill()?;
                CommandOutput::BackfillRun(backfill_run(backfill, db, args.force, progress).await?)
            }
            OutboxCommand::Audit(args) => {
                let limit = checked_limit(args.limit)?;
                let records = self.drainer.view().audit_log(limit).await?;
                CommandOutput::Audit(AuditOutput {
                    records: records.iter().map(AuditLine::from).collect(),
                })
            }
        })
    }

    fn backfill(&self) -> Result<(&Backfill, &DatabaseConnection), CliError> {
        self.backfill
            .as_ref()
            .map(|(backfill, db)| (backfill, db))
            .ok_or(CliError::NoBackfill)
    }

    async fn shards(&self, list: ListArgs) -> Result<ShardsOutput, CliError> {
        let limit = checked_limit(list.limit)?;
        // One transaction: the counts and lists agree.
        let snapshot = self.drainer.view().snapshot(list.kind, limit).await?;
        Ok(ShardsOutput {
            kind: list.kind,
            pending: snapshot.pending,
            dead_letters: snapshot.dead_letters,
            shards: snapshot
                .deepest
                .iter()
                .map(|depth| ShardView {
                    shard: shard_view::<C>(&depth.shard),
                    depth: depth.depth,
                    oldest_date_added: depth.oldest_date_added,
                    next_scheduled_for: (depth.next_scheduled_for
                        < outbox_core::store::paused_until())
                    .then_some(depth.next_scheduled_for),
                    state: snapshot
                        .failing
                        .iter()
                        .find(|failing| failing.shard == depth.shard)
                        .map(|failing| state_view(&failing.state)),
                })
                .collect(),
            failing: snapshot
                .failing
                .iter()
                .filter(|failing| !failing.state.is_paused())
                .map(|failing| FailingView {
                    shard: shard_view::<C>(&failing.shard),
                    state: state_view(&failing.state),
                })
                .collect(),
            paused: snapshot
                .failing
                .iter()
                .filter(|failing| failing.state.is_paused())
                .map(|failing| FailingView {
                    shard: shard_view::<C>(&failing.shard),
                    state: state_view(&failing.state),
                })
                .collect(),
        })
    }

    async fn dead_letter_count(&self, kind: OutboxKind) -> Result<u64, CliError> {
        Ok(self.drainer.view().dead_letter_count(kind).await?)
    }

    async fn dead_letters(&self, list: ListArgs) -> Result<DeadLettersOutput, CliError> {
        let limit = checked_limit(list.limit)?;
        let kind = list.kind;
        let rows = self.drainer.view().dead_letters(kind, limit).await?;
        let total = self.dead_letter_count(kind).await?.max(rows.len() as u64);
        Ok(DeadLettersOutput {
            kind: list.kind,
            total,
            dead_letters: rows
                .iter()
                .map(|dead| DeadLetterView {
                    id: dead.row.id,
                    message_id: dead.row.message_id,
                    shard: shard_view::<C>(&dead.row.shard),
                    category: dead.row.category,
                    category_name: category_name::<C>(dead.row.category),
                    object_identifier: dead.row.object_identifier,
                    payload: dead
                        .row
                        .payload
                        .as_ref()
                        .map(outbox_core::Payload::to_value_or_text),
                    error: dead.error.clone(),
                    date_added: dead.row.date_added,
                    dead_lettered_at: dead.dead_lettered_at,
                })
                .collect(),
        })
    }

    async fn apply(
        &self,
        kind: OutboxKind,
        action: DeadLetterAction,
        ids: &[i64],
    ) -> Result<u64, CliError> {
        Ok(match action {
            DeadLetterAction::Replayed => {
                self.drainer
                    .operator()
                    .replay_dead_letters(kind, ids)
                    .await?
            }
            DeadLetterAction::Discarded => {
                self.drainer
                    .operator()
                    .discard_dead_letters(kind, ids)
                    .await?
            }
        })
    }

    async fn change_dead_letters(
        &self,
        which: &DeadLetterIds,
        action: DeadLetterAction,
        progress: Progress,
    ) -> Result<DeadLettersChanged, CliError> {
        let kind = which.kind;
        let mut changed = DeadLettersChanged {
            kind: which.kind,
            action,
            count: 0,
            ids: Vec::new(),
        };
        if which.all {
            let total = self.dead_letter_count(kind).await?;
            let bar = progress.bar(total, action_name(action));
            // Page by page until a page holds nothing new: a replayed row
            // that fails again meanwhile and comes back is not replayed twice.
            let mut seen = HashSet::new();
            loop {
                let page: Vec<i64> = self
                    .drainer
                    .view()
                    .dead_letters(kind, PAGE)
                    .await?
                    .iter()
                    .map(|dead| dead.row.id)
                    .filter(|id| !seen.contains(id))
                    .collect();
                if page.is_empty() {
                    break;
                }
                changed.count += self.apply(kind, action, &page).await?;
                seen.extend(page.iter().copied());
                changed.ids.extend(page);
                bar.set_length(bar.length().unwrap_or(0).max(changed.count));
                bar.set_position(changed.count);
            }
            bar.finish();
        } else {
            let mut ids = which.ids.clone();
            ids.sort_unstable();
            ids.dedup();
            if ids.is_empty() || ids.len() > MAX_LIMIT as usize {
                return Err(CliError::DeadLetterIds { max: MAX_LIMIT });
            }
            // All or nothing: every id must be a dead letter of the table.
            let total = self.dead_letter_count(kind).await?;
            let known: HashSet<i64> = self
                .drainer
                .view()
                .dead_letters(kind, usize::try_from(total).unwrap_or(usize::MAX))
                .await?
                .iter()
                .map(|dead| dead.row.id)
                .collect();
            let unknown: Vec<i64> = ids
                .iter()
                .copied()
                .filter(|id| !known.contains(id))
                .collect();
            if !unknown.is_empty() {
                return Err(CliError::UnknownDeadLetters {
                    kind: which.kind,
                    ids: unknown,
                });
            }
            changed.count = self.apply(kind, action, &ids).await?;
            changed.ids = ids;
        }
        tracing::info!(
            kind = %which.kind,
            action = action_name(action),
            count = changed.count,
            "outbox dead letters changed from the command line"
        );
        Ok(changed)
    }

    async fn set_control(
        &self,
        args: &ControlArgs,
        change: ControlChange,
    ) -> Result<ControlOutput, CliError> {
        let target = control_target::<C>(&args.target)?;
        if args
            .reason
            .as_ref()
            .is_some_and(|reason| reason.chars().count() > REASON_MAX || reason.contains('\0'))
        {
            return Err(CliError::InvalidReason { max: REASON_MAX });
        }
        match change {
            ControlChange::Culled => {
                self.drainer
                    .operator()
                    .cull(target.clone(), args.reason.clone())
                    .await?
            }
            _ => {
                self.drainer
                    .operator()
                    .pause(target.clone(), args.reason.clone())
                    .await?
            }
        }
        Ok(ControlOutput {
            change,
            target: target_view::<C>(&target),
            reason: args.reason.clone(),
        })
    }

    async fn resume(&self, args: &TargetArgs) -> Result<ControlOutput, CliError> {
        let target: ControlTarget = control_target::<C>(args)?;
        let view = target_view::<C>(&target);
        // Only a target with a control: anything else is a typo, and
        // nothing is changed.
        let known = self.drainer.view().controls().await?;
        let Some(control) = known.iter().find(|control| control.target == target) else {
            return Err(CliError::UnknownControl {
                target: view.to_string(),
            });
        };
        let reason = control.reason.clone();
        if !self.drainer.operator().resume(&target).await? {
            // Lifted by someone else meanwhile.
            return Err(CliError::UnknownControl {
                target: view.to_string(),
            });
        }
        Ok(ControlOutput {
            change: ControlChange::Resumed,
            target: view,
            reason,
        })
    }

    async fn retry(&self, args: &ShardArgs) -> Result<RetryOutput, CliError> {
        let shard = shard_key::<C>(args)?;
        let view = shard_view::<C>(&shard);
        let failing = self
            .drainer
            .view()
            .failing_shards(shard.kind(), MAX_LIMIT as usize)
            .await?;
        if !failing.iter().any(|failing| failing.shard == shard) {
            return Err(CliError::ShardNotFailing {
                shard: view.to_string(),
            });
        }
        // Asks again for up to a second while a worker holds its bucket.
        let released = self
            .drainer
            .operator()
            .retry_now(std::slice::from_ref(&shard))
            .await?;
        if !released.is_empty() {
            tracing::info!(%shard, "outbox shard retried from the command line");
            return Ok(RetryOutput {
                shard: view,
                released: true,
            });
        }
        Ok(RetryOutput {
            shard: view,
            released: false,
        })
    }
}

fn checked_limit(limit: u32) -> Result<usize, CliError> {
    if limit == 0 || limit > MAX_LIMIT {
        return Err(CliError::InvalidLimit { max: MAX_LIMIT });
    }
    Ok(limit as usize)
}

fn state_view(state: &outbox_core::ShardState) -> StateView {
    StateView {
        status: state.status(),
        next_attempt: state.next_attempt(),
        attempts: state.attempts,
        last_error: state.last_error.clone(),
        failed_at: state.failed_at,
    }
}

fn action_name(action: DeadLetterAction) -> &'static str {
    match action {
        DeadLetterAction::Replayed => "replaying",
        DeadLetterAction::Discarded => "discarding",
    }
}
