//! The operator CLI (`outbox_seaorm::cli`, feature `cli`, on for this
//! crate's tests through its dev-dependency on itself): the clap tree, and
//! each command's effect and `--json` answer on PostgreSQL and SQLite.

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use common::{OutboxCategory, Recorder};
use outbox_core::store::StoreAdmin;
use outbox_core::{Drainer, DrainerBuilder, OutboxKind, ShardKey};
use outbox_seaorm::backfill::Backfill;
use outbox_seaorm::cli::output::{
    AuditOutput, BackfillRunOutput, BackfillStatusOutput, ControlChange, ControlOutput, Count,
    DeadLetterAction, DeadLettersChanged, DeadLettersOutput, DrainOutput, RetryOutput,
    ShardsOutput,
};
use outbox_seaorm::cli::{
    run_cli_from, CliError, DeadLetterCommand, Kind, ListArgs, OutboxArgs, OutboxCli,
    OutboxCommand, Progress, StandaloneCli,
};
use outbox_seaorm::{write_control, write_region, ObjectId, OutboxMessage, ShardId};
use outbox_testing::database::{DbBackend, TestDatabase};
use sea_orm::ConnectionTrait;
use serde::de::DeserializeOwned;

/// An app's parser with the outbox commands mounted as a subcommand.
#[derive(Debug, Parser)]
#[command(name = "app")]
enum App {
    /// Serve.
    Serve,
    /// The outbox.
    Outbox(OutboxArgs),
}

fn parse(line: &str) -> Result<OutboxArgs, clap::Error> {
    let words = std::iter::once("app").chain(line.split_whitespace());
    match App::try_parse_from(words)? {
        App::Outbox(args) => Ok(args),
        App::Serve => panic!("not an outbox command: {line}"),
    }
}

// ---- The clap tree -------------------------------------------------------

#[test]
fn the_clap_tree_is_consistent() {
    App::command().debug_assert();
    StandaloneCli::command().debug_assert();
}

#[test]
fn commands_parse_with_their_defaults_and_json_anywhere() {
    let args = parse("outbox shards").unwrap();
    assert_eq!(
        args,
        OutboxArgs {
            json: false,
            command: OutboxCommand::Shards(ListArgs {
                kind: Kind::Region,
                limit: 100
            }),
        }
    );
    let args = parse("outbox --json shards --kind control --limit 5").unwrap();
    assert!(args.json);
    assert_eq!(
        args.command,
        OutboxCommand::Shards(ListArgs {
            kind: Kind::Control,
            limit: 5
        })
    );
    assert!(parse("outbox shards --json").unwrap().json);
    assert!(
        parse("outbox dead-letters list --kind region --json")
            .unwrap()
            .json
    );
    match parse("outbox dead-letters replay --kind region 3 4")
        .unwrap()
        .command
    {
        OutboxCommand::DeadLetters(DeadLetterCommand::Replay(which)) => {
            assert_eq!((which.ids, which.all), (vec![3, 4], false));
        }
        other => panic!("{other:?}"),
    }
    match parse("outbox dead-letters discard --kind control --all")
        .unwrap()
        .command
    {
        OutboxCommand::DeadLetters(DeadLetterCommand::Discard(which)) => {
            assert_eq!(
                (which.ids, which.all, which.kind),
                (vec![], true, Kind::Control)
            );
        }
        other => panic!("{other:?}"),
    }
    match parse("outbox pause --kind control --scope UserScope --shard 7 --region us --reason why")
        .unwrap()
        .command
    {
        OutboxCommand::Pause(args) => {
            assert_eq!(args.target.scope, "UserScope");
            assert_eq!(args.target.shard, Some(7));
            assert_eq!(args.target.region.as_deref(), Some("us"));
            assert_eq!(args.reason.as_deref(), Some("why"));
        }
        other => panic!("{other:?}"),
    }
    match parse("outbox drain").unwrap().command {
        OutboxCommand::Drain(drain) => assert_eq!(drain.timeout, 60),
        other => panic!("{other:?}"),
    }
    for line in [
        "outbox cull --kind region --scope 0",
        "outbox resume --kind region --scope 0 --shard 1",
        "outbox retry --kind region --scope 0 --shard 1",
        "outbox drain --timeout 5",
        "outbox backfill status",
        "outbox backfill run --force",
    ] {
        parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
    }
}

#[test]
fn bad_command_lines_are_refused_by_the_parser() {
    for line in [
        "outbox shards --kind nowhere",
        "outbox shards --limit 0",
        "outbox shards --limit 10001",
        "outbox dead-letters replay --kind region",
        "outbox dead-letters replay --kind region 3 --all",
        "outbox dead-letters discard 3",
        "outbox pause --kind region",
        "outbox retry --kind region --scope 0",
        "outbox drain --timeout soon",
        "outbox backfill",
    ] {
        assert!(parse(line).is_err(), "{line} parsed");
    }
}

// ---- Against real databases ---------------------------------------------

struct Setup {
    db: TestDatabase,
    recorder: Recorder,
    cli: OutboxCli<OutboxCategory>,
}

impl Setup {
    async fn new(backend: DbBackend, label: &str) -> Self {
        Self::with(backend, label, |drainer| drainer).await
    }

    async fn with(
        backend: DbBackend,
        label: &str,
        configure: impl FnOnce(DrainerBuilder<OutboxCategory>) -> DrainerBuilder<OutboxCategory>,
    ) -> Self {
        let db = common::database(backend, label).await;
        let recorder = Recorder::new();
        let drainer = configure(Drainer::builder(db.store(), recorder.receivers())).build();
        let cli = OutboxCli::new(drainer)
            .with_progress(Progress::Hidden)
            .with_actor("cli:tester");
        Self { db, recorder, cli }
    }

    /// Runs `line` with `--json` and parses its answer.
    async fn json<T: DeserializeOwned>(&self, line: &str) -> T {
        let args = parse(&format!("outbox {line} --json")).unwrap();
        let mut out = Vec::new();
        self.cli
            .run(&args, &mut out)
            .await
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("{line}: {e}: {}", String::from_utf8_lossy(&out)))
    }

    /// Runs `line` as text.
    async fn text(&self, line: &str) -> String {
        let args = parse(&format!("outbox {line}")).unwrap();
        let mut out = Vec::new();
        self.cli
            .run(&args, &mut out)
            .await
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        String::from_utf8(out).unwrap()
    }

    /// Runs `line`, which must fail, and writes nothing.
    async fn error(&self, line: &str) -> CliError {
        let args = parse(&format!("outbox {line}")).unwrap();
        let mut out = Vec::new();
        let error = self.cli.run(&args, &mut out).await.expect_err(line);
        assert!(out.is_empty(), "{line} wrote {out:?}");
        error
    }

    async fn write(&self, scope_category: OutboxCategory, shard: i64, object: i64) -> i64 {
        write_region(
            &self.db.db,
            OutboxMessage::new(scope_category, ShardId(shard), ObjectId(object)),
        )
        .await
        .unwrap()
        .id
    }

    /// Background rounds until nothing is due (paused and backing-off
    /// shards are not).
    async fn drain_due(&self) -> outbox_core::DrainReport {
        let mut total = outbox_core::DrainReport::default();
        for kind in OutboxKind::ALL {
            loop {
                let report = self.cli.drainer().drain_due(kind).await.unwrap();
                if report.is_empty() {
                    break;
                }
                total.absorb(report);
            }
        }
        total
    }

    async fn pending(&self, kind: OutboxKind) -> u64 {
        self.db.store().pending_count(kind).await.unwrap()
    }

    fn delivered_objects(&self) -> Vec<i64> {
        let mut objects: Vec<i64> = self
            .recorder
            .deliveries()
            .iter()
            .map(|delivery| delivery.object)
            .collect();
        objects.sort_unstable();
        objects
    }
}

/// `shards`: pending rows, the deepest shard first, the failing shard with
/// its attempts and last error; as JSON and as text.
async fn shards_show_the_deepest_and_the_failing_with_their_last_error(backend: DbBackend) {
    let t = Setup::new(backend, "cli_shards").await;
    t.write(OutboxCategory::OrganizationUpdate, 8, 80).await;
    t.recorder
        .fail_when(|message| message.shard.identifier() == 8);
    let report = t.drain_due().await;
    assert_eq!(report.failures.len(), 1);
    for object in [70, 71, 72] {
        t.write(OutboxCategory::OrganizationMemberUpdate, 7, object)
            .await;
    }

    let shards: ShardsOutput = t.json("shards").await;
    assert_eq!(
        (shards.kind, shards.pending, shards.dead_letters),
        (Kind::Region, Count::Exact(4), Count::Exact(0))
    );
    assert_eq!(shards.shards.len(), 2);
    assert_eq!(shards.shards[0].shard.identifier, Some(7));
    assert_eq!(
        shards.shards[0].shard.scope_name.as_deref(),
        Some("OrganizationScope")
    );
    assert_eq!(shards.shards[0].depth, Count::Exact(3));
    assert!(shards.shards[0].state.is_none());
    assert_eq!(shards.shards[1].shard.identifier, Some(8));
    assert_eq!(shards.failing.len(), 1);
    let failing = &shards.failing[0];
    assert_eq!(failing.shard.identifier, Some(8));
    assert_eq!(failing.state.attempts, 1);
    assert_eq!(failing.state.status, outbox_core::ShardStatus::BackingOff);
    assert!(failing.state.next_attempt.is_some(), "a real time");
    let error = failing.state.last_error.clone().unwrap();
    assert!(!error.is_empty());
    assert_eq!(shards.shards[1].state.as_ref(), Some(&failing.state));

    let limited: ShardsOutput = t.json("shards --limit 1").await;
    assert_eq!(limited.shards.len(), 1);
    let control: ShardsOutput = t.json("shards --kind control").await;
    assert_eq!(
        (control.kind, control.pending),
        (Kind::Control, Count::Exact(0))
    );

    let text = t.text("shards").await;
    assert!(
        text.contains("region outbox: 4 rows pending, 0 dead letters"),
        "{text}"
    );
    assert!(
        text.contains("region OrganizationScope(0)/7: 3 rows"),
        "{text}"
    );
    assert!(text.contains("failing shards:"), "{text}");
    assert!(text.contains(&error), "{text}");
}

/// `pause` parks one shard (a round delivers nothing of it, the others
/// go); `resume` makes it due and it is delivered; a second `resume` is an
/// unknown control.
async fn a_paused_shard_is_delivered_only_after_resume(backend: DbBackend) {
    let t = Setup::new(backend, "cli_pause").await;
    t.write(OutboxCategory::OrganizationUpdate, 7, 70).await;
    t.write(OutboxCategory::OrganizationUpdate, 8, 80).await;

    let paused: ControlOutput = t
        .json("pause --kind region --scope OrganizationScope --shard 7 --reason investigating")
        .await;
    assert_eq!(paused.change, ControlChange::Paused);
    assert_eq!(
        (paused.target.scope, paused.target.identifier),
        (0, Some(7))
    );
    assert_eq!(paused.reason.as_deref(), Some("investigating"));
    let controls = t.db.store().controls().await.unwrap();
    assert_eq!(controls.len(), 1);

    t.drain_due().await;
    assert_eq!(t.delivered_objects(), vec![80], "the paused shard waits");
    assert_eq!(t.pending(OutboxKind::Region).await, 1);
    let shards: ShardsOutput = t.json("shards").await;
    assert!(
        shards.failing.is_empty(),
        "paused is not failing: {shards:?}"
    );
    assert_eq!(shards.paused.len(), 1);
    assert_eq!(
        shards.paused[0].state.status,
        outbox_core::ShardStatus::Paused
    );
    assert_eq!(
        shards.paused[0].state.next_attempt, None,
        "no sentinel date"
    );
    assert_eq!(shards.shards[0].next_scheduled_for, None, "{shards:?}");

    let resumed: ControlOutput = t.json("resume --kind region --scope 0 --shard 7").await;
    assert_eq!(resumed.change, ControlChange::Resumed);
    assert_eq!(resumed.reason.as_deref(), Some("investigating"));
    t.drain_due().await;
    assert_eq!(t.delivered_objects(), vec![70, 80]);
    assert_eq!(t.pending(OutboxKind::Region).await, 0);

    let error = t.error("resume --kind region --scope 0 --shard 7").await;
    assert!(matches!(error, CliError::UnknownControl { .. }), "{error}");
}

/// `cull` of a whole scope drops its rows without delivery, other scopes go
/// on; `resume` lifts it.
async fn a_culled_scope_is_dropped_without_delivery(backend: DbBackend) {
    let t = Setup::new(backend, "cli_cull").await;
    t.write(OutboxCategory::UserUpdate, 1, 10).await;
    t.write(OutboxCategory::UserUpdate, 2, 20).await;
    t.write(OutboxCategory::OrganizationUpdate, 7, 70).await;

    let culled: ControlOutput = t.json("cull --kind region --scope UserScope").await;
    assert_eq!(culled.change, ControlChange::Culled);
    assert_eq!(culled.target.identifier, None);
    let text = t.text("cull --kind region --scope userscope").await;
    assert!(text.contains("culled in every process"), "{text}");

    let report = t.drain_due().await;
    assert_eq!(report.culled, 2);
    assert_eq!(t.delivered_objects(), vec![70]);
    assert_eq!(t.pending(OutboxKind::Region).await, 0);

    let _: ControlOutput = t.json("resume --kind region --scope UserScope").await;
    assert!(t.db.store().controls().await.unwrap().is_empty());
    t.write(OutboxCategory::UserUpdate, 1, 11).await;
    t.drain_due().await;
    assert_eq!(t.delivered_objects(), vec![11, 70]);
}

/// Dead letters: listed; replay of an unknown id changes nothing; replay
/// brings one back and it is delivered; `discard --all` removes the rest.
async fn dead_letters_are_listed_replayed_and_discarded(backend: DbBackend) {
    let t = Setup::with(backend, "cli_dead_letters", |drainer| {
        drainer.dead_letter(common::OutboxScope::AuditLogScope, 1)
    })
    .await;
    let mut ids = Vec::new();
    for event in [1, 2, 3] {
        ids.push(t.write(OutboxCategory::AuditLogEvent, event, event).await);
    }
    t.recorder.fail_when(|_| true);
    let report = t.drain_due().await;
    assert_eq!(report.dead_lettered, 3);

    let listed: DeadLettersOutput = t.json("dead-letters list --kind region").await;
    assert_eq!((listed.kind, listed.total), (Kind::Region, 3));
    let mut listed_ids: Vec<i64> = listed.dead_letters.iter().map(|dead| dead.id).collect();
    listed_ids.sort_unstable();
    assert_eq!(listed_ids, ids);
    assert_eq!(
        listed.dead_letters[0].category_name.as_deref(),
        Some("AuditLogEvent")
    );
    assert!(!listed.dead_letters[0].error.is_empty());
    let one: DeadLettersOutput = t.json("dead-letters list --limit 1").await;
    assert_eq!((one.total, one.dead_letters.len()), (3, 1));
    let text = t.text("dead-letters list").await;
    assert!(text.contains("3 dead letters"), "{text}");
    assert!(text.contains(&format!("#{} ", ids[0])), "{text}");

    // All or nothing: one unknown id, nothing replayed.
    let error = t
        .error(&format!(
            "dead-letters replay --kind region {} 999999",
            ids[0]
        ))
        .await;
    match &error {
        CliError::UnknownDeadLetters { kind, ids } => {
            assert_eq!((*kind, ids.as_slice()), (Kind::Region, &[999_999][..]));
        }
        other => panic!("{other}"),
    }
    assert_eq!(t.pending(OutboxKind::Region).await, 0);
    let error = t
        .error(&format!("dead-letters replay --kind control {}", ids[0]))
        .await;
    assert!(
        matches!(error, CliError::UnknownDeadLetters { .. }),
        "{error}"
    );
    assert_eq!(
        t.db.store()
            .dead_letters(OutboxKind::Region, 10)
            .await
            .unwrap()
            .len(),
        3
    );

    t.recorder.stop_failing();
    let replayed: DeadLettersChanged = t
        .json(&format!("dead-letters replay --kind region {}", ids[0]))
        .await;
    assert_eq!(
        (replayed.action, replayed.count, replayed.ids.as_slice()),
        (DeadLetterAction::Replayed, 1, &ids[..1])
    );
    assert_eq!(t.pending(OutboxKind::Region).await, 1);
    t.drain_due().await;
    let delivered: Vec<i64> = t.recorder.deliveries().iter().map(|d| d.id).collect();
    assert_eq!(
        delivered,
        vec![ids[0]],
        "the replayed row is delivered, same id"
    );

    let discarded: DeadLettersChanged = t.json("dead-letters discard --kind region --all").await;
    assert_eq!(
        (discarded.action, discarded.count),
        (DeadLetterAction::Discarded, 2)
    );
    let listed: DeadLettersOutput = t.json("dead-letters list").await;
    assert_eq!((listed.total, listed.dead_letters.len()), (0, 0));
    assert_eq!(t.pending(OutboxKind::Region).await, 0);
    let error = t
        .error(&format!("dead-letters discard --kind region {}", ids[1]))
        .await;
    assert!(
        matches!(error, CliError::UnknownDeadLetters { .. }),
        "{error}"
    );
}

/// `retry` makes a quarantined shard due at once; a shard that is not
/// failing is refused.
async fn retry_makes_a_quarantined_shard_due(backend: DbBackend) {
    let t = Setup::new(backend, "cli_retry").await;
    t.write(OutboxCategory::OrganizationUpdate, 7, 70).await;
    t.recorder.fail_permanently_when(|_| true);
    t.drain_due().await;
    let shards: ShardsOutput = t.json("shards").await;
    assert_eq!(
        shards.failing[0].state.status,
        outbox_core::ShardStatus::Quarantined,
        "{shards:?}"
    );
    assert_eq!(shards.failing[0].state.next_attempt, None);

    let error = t.error("retry --kind region --scope 0 --shard 8").await;
    assert!(matches!(error, CliError::ShardNotFailing { .. }), "{error}");

    t.recorder.stop_failing();
    let retried: RetryOutput = t
        .json("retry --kind region --scope OrganizationScope --shard 7")
        .await;
    assert!(retried.released);
    t.drain_due().await;
    assert_eq!(t.delivered_objects(), vec![70]);
}

/// Input that names nothing real is refused with a typed error, and
/// nothing changes.
async fn bad_input_is_refused_and_changes_nothing(backend: DbBackend) {
    let t = Setup::new(backend, "cli_bad_input").await;
    t.write(OutboxCategory::OrganizationUpdate, 7, 70).await;

    let error = t.error("pause --kind region --scope NoSuchScope").await;
    match &error {
        CliError::UnknownScope { given, known } => {
            assert_eq!(given, "NoSuchScope");
            assert!(known.contains("OrganizationScope (0)"), "{known}");
        }
        other => panic!("{other}"),
    }
    let error = t.error("pause --kind region --scope 99").await;
    assert!(matches!(error, CliError::UnknownScope { .. }), "{error}");
    let error = t
        .error("pause --kind control --scope UserScope --shard 1")
        .await;
    assert!(matches!(error, CliError::RegionRequired), "{error}");
    let error = t
        .error("cull --kind region --scope UserScope --region us")
        .await;
    assert!(matches!(error, CliError::RegionNotAllowed), "{error}");
    let long = "x".repeat(1001);
    let error = t
        .error(&format!("pause --kind region --scope 0 --reason {long}"))
        .await;
    assert!(matches!(error, CliError::InvalidReason { .. }), "{error}");
    let error = t.error("resume --kind region --scope 0").await;
    assert!(matches!(error, CliError::UnknownControl { .. }), "{error}");
    let error = t.error("backfill status").await;
    assert!(matches!(error, CliError::NoBackfill), "{error}");
    assert!(error.to_string().contains("no backfill is configured"));

    assert!(t.db.store().controls().await.unwrap().is_empty());
    assert_eq!(t.pending(OutboxKind::Region).await, 1);
    t.drain_due().await;
    assert_eq!(t.delivered_objects(), vec![70]);
}

/// `drain` delivers both outboxes until they are empty.
async fn drain_empties_both_outboxes(backend: DbBackend) {
    let t = Setup::new(backend, "cli_drain").await;
    for object in 1..=5 {
        t.write(OutboxCategory::OrganizationUpdate, object % 2, object)
            .await;
    }
    write_control(
        &t.db.db,
        ["us", "de"],
        OutboxMessage::new(OutboxCategory::UserUpdate, ShardId(9), ObjectId(90)),
    )
    .await
    .unwrap();

    let drained: DrainOutput = t.json("drain --timeout 30").await;
    assert_eq!(drained.peak_pending, 7);
    assert_eq!(drained.deliveries, 7);
    assert_eq!((drained.failed, drained.culled), (0, 0));
    assert!(drained.rounds >= 2, "{drained:?}");
    assert_eq!(t.pending(OutboxKind::Region).await, 0);
    assert_eq!(t.pending(OutboxKind::Control).await, 0);
    assert_eq!(t.recorder.deliveries().len(), 7);

    let text = t.text("drain").await;
    assert!(text.contains("outboxes empty"), "{text}");
}

/// A delivery that fails during `drain` is listed with its category by
/// number and by name (here dead-lettered by its scope's policy, so the
/// drain still ends).
async fn drain_names_the_category_of_a_failed_delivery(backend: DbBackend) {
    let t = Setup::with(backend, "cli_drain_failure", |drainer| {
        drainer.dead_letter(common::OutboxScope::AuditLogScope, 1)
    })
    .await;
    t.write(OutboxCategory::AuditLogEvent, 4, 4).await;
    t.recorder.fail_when(|_| true);

    let drained: DrainOutput = t.json("drain --timeout 30").await;
    assert_eq!((drained.failed, drained.dead_lettered), (1, 1));
    let failure = &drained.failures[0];
    assert_eq!(
        (failure.category, failure.category_name.as_deref()),
        (
            outbox_core::Category::value(OutboxCategory::AuditLogEvent),
            Some("AuditLogEvent")
        )
    );
    assert_eq!(failure.shard.scope_name.as_deref(), Some("AuditLogScope"));
    assert!(failure.dead_lettered);
}

/// `drain` fails with `DrainTimedOut` when a paused shard keeps rows
/// pending, and says so.
async fn drain_fails_when_time_runs_out(backend: DbBackend) {
    let t = Setup::new(backend, "cli_drain_timeout").await;
    t.write(OutboxCategory::OrganizationUpdate, 7, 70).await;
    t.write(OutboxCategory::OrganizationUpdate, 8, 80).await;
    let _: ControlOutput = t.json("pause --kind region --scope 0 --shard 7").await;

    let error = t.error("drain --timeout 1").await;
    match error {
        CliError::DrainTimedOut {
            pending, paused, ..
        } => assert_eq!((pending, paused), (1, 1)),
        other => panic!("{other}"),
    }
    assert_eq!(t.delivered_objects(), vec![80]);
}

/// `run_cli_from`: the answer on `out`; a refused command on `err` with a
/// non-zero exit code; a usage error exits 2.
async fn run_cli_exits_non_zero_on_errors(backend: DbBackend) {
    let t = Setup::new(backend, "cli_exit").await;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_cli_from(&t.cli, ["outbox", "shards", "--json"], &mut out, &mut err).await;
    assert_eq!(code, ExitCode::SUCCESS);
    let shards: ShardsOutput = serde_json::from_slice(&out).unwrap();
    assert_eq!(shards.pending, Count::Exact(0));

    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_cli_from(
        &t.cli,
        ["outbox", "pause", "--kind", "region", "--scope", "Nope"],
        &mut out,
        &mut err,
    )
    .await;
    assert_eq!(code, ExitCode::FAILURE);
    let err = String::from_utf8(err).unwrap();
    assert!(err.starts_with("error: unknown scope `Nope`"), "{err}");
    assert!(out.is_empty());

    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_cli_from(
        &t.cli,
        ["outbox", "shards", "--kind", "x"],
        &mut out,
        &mut err,
    )
    .await;
    assert_eq!(code, ExitCode::from(2));
    assert!(!err.is_empty());
}

pub mod widget {
    use common::OutboxCategory;
    use outbox_core::HandlerError;
    use outbox_seaorm::replication::RegionReplication;
    use sea_orm::entity::prelude::*;

    use super::common;

    /// A region model whose rows predate its outbox.
    #[derive(
        Clone,
        Debug,
        PartialEq,
        DeriveEntityModel,
        outbox_seaorm::replication::ReplicatedRegionModel,
    )]
    #[sea_orm(table_name = "widget")]
    #[outbox(category = OutboxCategory::OrganizationUpdate)]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        pub organization_id: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}

    #[async_trait::async_trait]
    impl RegionReplication for Model {
        async fn handle_async_replication(&self, _: &(), _: i64) -> Result<(), HandlerError> {
            Ok(())
        }
        async fn handle_async_deletion(
            _: &(),
            _: i64,
            _: i64,
            _: Option<serde_json::Value>,
        ) -> Result<(), HandlerError> {
            Ok(())
        }
    }
}

/// `backfill status` and `backfill run`, option-gated and forced, on a
/// replicated model; the backfilled rows are then drained.
async fn backfill_status_and_run(backend: DbBackend) {
    let t = Setup::new(backend, "cli_backfill").await;
    t.db.db
        .execute_unprepared(
            "CREATE TABLE widget (id bigint PRIMARY KEY, organization_id bigint NOT NULL)",
        )
        .await
        .unwrap();
    for id in 1..=7 {
        t.db.db
            .execute_unprepared(&format!(
                "INSERT INTO widget (id, organization_id) VALUES ({id}, {})",
                id % 3
            ))
            .await
            .unwrap();
    }
    let cli = OutboxCli::new(t.cli.drainer().clone())
        .with_backfill(
            Backfill::new().model::<widget::Model>().batch_size(3),
            t.db.db.clone(),
        )
        .with_progress(Progress::Hidden);
    let t = Setup { cli, ..t };

    let status: BackfillStatusOutput = t.json("backfill status").await;
    assert!(!status.forced);
    assert_eq!(status.tables.len(), 1);
    let table = &status.tables[0];
    assert_eq!(table.table, "widget");
    assert_eq!((table.target_version, table.done), (None, false));
    let text = t.text("backfill status").await;
    assert!(
        text.contains("widget: coded version 1, no cursor, no target (option unset): waiting"),
        "{text}"
    );

    let forced: BackfillStatusOutput = t.json("backfill status --force").await;
    assert!(forced.forced);
    assert_eq!(
        (
            forced.tables[0].target_version,
            forced.tables[0].rows_remaining
        ),
        (Some(1), 7)
    );

    let gated: BackfillRunOutput = t.json("backfill run").await;
    assert_eq!(gated.backfilled, 0, "the option is unset");
    assert_eq!(t.pending(OutboxKind::Region).await, 0);

    let run: BackfillRunOutput = t.json("backfill run --force").await;
    assert_eq!(run.backfilled, 7);
    assert_eq!(run.tables.len(), 1);
    assert_eq!((run.tables[0].rows, run.tables[0].expected), (7, 7));
    assert_eq!(t.pending(OutboxKind::Region).await, 7);
    let done: BackfillStatusOutput = t.json("backfill status --force").await;
    assert!(done.tables[0].done);
    let again: BackfillRunOutput = t.json("backfill run --force").await;
    assert_eq!(again.backfilled, 0, "done until the next version");

    let drained: DrainOutput = t.json("drain").await;
    assert_eq!(drained.deliveries, 7);
    assert_eq!(t.delivered_objects(), (1..=7).collect::<Vec<_>>());
}

/// Every command that changes something is in the audit log with who ran
/// it, on what, why and how it ended; reads are not; `audit` lists the
/// log newest first, as text or JSON.
async fn changes_are_recorded_in_the_audit_log(backend: DbBackend) {
    let t = Setup::new(backend, "cli_audit").await;
    t.write(OutboxCategory::OrganizationUpdate, 7, 70).await;
    let _: ShardsOutput = t.json("shards").await;
    let _: ControlOutput = t
        .json("pause --kind region --scope OrganizationScope --shard 7 --reason deploy")
        .await;
    let _: ControlOutput = t.json("resume --kind region --scope 0 --shard 7").await;
    let error = t.error("resume --kind region --scope 0 --shard 7").await;
    assert!(matches!(error, CliError::UnknownControl { .. }), "{error}");

    let audit: AuditOutput = t.json("audit --limit 10").await;
    let lines: Vec<(&str, &str, &str, &str)> = audit
        .records
        .iter()
        .map(|line| {
            (
                line.actor.as_str(),
                line.action.as_str(),
                line.target.as_deref().unwrap_or(""),
                line.outcome.as_str(),
            )
        })
        .collect();
    assert_eq!(
        lines,
        [
            (
                "cli:tester",
                "resume",
                "region scope OrganizationScope (0) shard 7",
                "error"
            ),
            (
                "cli:tester",
                "resume",
                "region scope OrganizationScope (0) shard 7",
                "ok"
            ),
            (
                "cli:tester",
                "pause",
                "region scope OrganizationScope (0) shard 7",
                "ok"
            ),
        ]
    );
    assert!(audit.records.iter().all(|line| line.role == "cli"));
    assert_eq!(audit.records[2].reason.as_deref(), Some("deploy"));
    assert!(audit.records[0]
        .detail
        .as_deref()
        .unwrap()
        .contains("no pause or cull"));
    let text = t.text("audit --limit 1").await;
    assert!(
        text.contains("cli:tester (cli) resume region scope OrganizationScope (0) shard 7: error"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1, "{text}");
}

outbox_testing::on_both_backends!(
    changes_are_recorded_in_the_audit_log,
    drain_names_the_category_of_a_failed_delivery,
    shards_show_the_deepest_and_the_failing_with_their_last_error,
    a_paused_shard_is_delivered_only_after_resume,
    a_culled_scope_is_dropped_without_delivery,
    dead_letters_are_listed_replayed_and_discarded,
    retry_makes_a_quarantined_shard_due,
    bad_input_is_refused_and_changes_nothing,
    drain_empties_both_outboxes,
    drain_fails_when_time_runs_out,
    run_cli_exits_non_zero_on_errors,
    backfill_status_and_run,
);

/// `--kind` takes each kind by the name the CLI prints for it (`Display`,
/// the JSON output), and refuses any other with the names it accepts.
#[test]
fn every_kind_parses_from_the_name_it_is_shown_by() {
    for kind in OutboxKind::ALL {
        let args = parse(&format!("outbox shards --kind {kind}")).unwrap();
        assert_eq!(
            args.command,
            OutboxCommand::Shards(ListArgs { kind, limit: 100 }),
            "{kind}"
        );
        let shown = serde_json::to_value(kind).unwrap();
        assert_eq!(shown, serde_json::json!(kind.as_str()));
    }
    let error = parse("outbox shards --kind regional")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("regional") && error.contains("`region` or `control`"),
        "{error}"
    );
    let shard = ShardKey::from_raw(OutboxKind::Control, 1, 2, Some("us".into()));
    assert_eq!(shard.kind(), Kind::Control);
}
