//! Runtime controls (rule 2's operator's kill switch, and the pause): a
//! control set through one process holds in every other within
//! `controls_refresh`, for the background drain and the synchronous flush;
//! lifting it lets everything kept flow again, and nothing is lost but what
//! a cull drops.

use std::time::Duration;

use super::{
    audit, drainer, drainer_builder, org, update, Backend, NewRow, OutboxCategory, OutboxScope,
};
use crate::Recorder;
use outbox_core::clock::{Clock, ManualClock};
use outbox_core::control::ControlTarget;
use outbox_core::drain::{DrainConfig, FlushError, DEFAULT_COUNT_CAP};
use outbox_core::registry::Scope;
use outbox_core::shard::OutboxKind;
use outbox_core::store::{Count, StoreAdmin};

/// A shard paused through one process is neither delivered by another's
/// drain nor by its synchronous flush, its rows stay (new ones too), and
/// it shows as paused; resumed, its newest payload is delivered, also by the
/// process whose view was still a second old when the pause was lifted.
pub async fn a_pause_set_in_one_process_holds_in_another_until_resumed<B: Backend>(backend: &B) {
    let store = backend.fresh("pause").await;
    let other = backend.reconnect(&store).await;
    let (paused, neighbour) = (org(1), org(2));
    backend
        .write(&store, &[update(&paused, 1, 0), update(&neighbour, 2, 0)])
        .await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    let a = drainer(store.clone(), &recorder, &clock, DrainConfig::default());
    let b = drainer(other.clone(), &recorder, &clock, DrainConfig::default());
    let target = ControlTarget::Shard(paused.clone());
    a.operator()
        .pause(target.clone(), Some("investigating".into()))
        .await
        .unwrap();
    assert_eq!(store.controls().await.unwrap().len(), 1);

    let report = b.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 1, "the neighbour only");
    backend.write(&store, &[update(&paused, 1, 1)]).await;
    assert_eq!(b.drain_due(OutboxKind::Region).await.unwrap().deliveries, 0);
    assert_eq!(a.drain_due(OutboxKind::Region).await.unwrap().deliveries, 0);
    assert!(
        matches!(
            b.drain_shard(&paused, None).await,
            Err(FlushError::Paused { .. })
        ),
        "a synchronous flush waits too, and says why"
    );
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 2);
    let failing = store.failing_shards(OutboxKind::Region, 10).await.unwrap();
    assert_eq!(failing.len(), 1);
    assert!(failing[0].state.is_paused() && !failing[0].state.is_quarantined());
    assert_eq!(
        failing[0].state.last_error.as_deref(),
        Some("paused by an operator")
    );

    assert!(a.operator().resume(&target).await.unwrap());
    assert!(store.controls().await.unwrap().is_empty());
    // B read the controls less than a second ago: it still sees the pause
    // and parks the shard again; its next read releases it.
    assert_eq!(b.drain_due(OutboxKind::Region).await.unwrap().deliveries, 0);
    clock.advance(Duration::from_secs(1));
    let report = b.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 1);
    let objects: Vec<(i64, i64)> = recorder
        .deliveries()
        .iter()
        .map(|d| (d.object, super::v(&d.payload)))
        .collect();
    assert_eq!(objects, vec![(2, 0), (1, 1)], "the newest payload, once");
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
    assert!(store
        .failing_shards(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());
}

/// A paused scope holds every shard of it, new ones too, and no other; a
/// cull that replaces the pause drops their rows without a delivery; lifted,
/// the scope's new rows flow again.
pub async fn a_scope_control_holds_its_new_shards_and_a_cull_drops_their_rows<B: Backend>(
    backend: &B,
) {
    let store = backend.fresh("scope_control").await;
    let other = backend.reconnect(&store).await;
    backend
        .write(
            &store,
            &[
                update(&org(1), 1, 0),
                update(&org(2), 2, 0),
                NewRow {
                    shard: audit(9),
                    category: OutboxCategory::AuditLogEvent,
                    object: 9,
                    payload: None,
                    payload_version: None,
                },
            ],
        )
        .await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    let a = drainer(store.clone(), &recorder, &clock, DrainConfig::default());
    let b = drainer(other, &recorder, &clock, DrainConfig::default());
    let scope = ControlTarget::Scope {
        kind: OutboxKind::Region,
        region: None,
        scope: OutboxScope::OrganizationScope.value(),
    };
    a.operator().pause(scope.clone(), None).await.unwrap();
    assert_eq!(
        b.drain_due(OutboxKind::Region).await.unwrap().deliveries,
        1,
        "the audit event, another scope"
    );
    backend.write(&store, &[update(&org(3), 3, 0)]).await;
    assert_eq!(b.drain_due(OutboxKind::Region).await.unwrap().deliveries, 0);
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 3);

    a.operator()
        .cull(scope.clone(), Some("bad deploy".into()))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(1));
    let report = b.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.deliveries, report.culled), (0, 3));
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);

    assert!(a.operator().resume(&scope).await.unwrap());
    assert!(
        !a.operator().resume(&scope).await.unwrap(),
        "nothing left to lift"
    );
    clock.advance(Duration::from_secs(1));
    backend.write(&store, &[update(&org(4), 4, 0)]).await;
    assert_eq!(b.drain_due(OutboxKind::Region).await.unwrap().deliveries, 1);
    let mut objects: Vec<i64> = recorder.deliveries().iter().map(|d| d.object).collect();
    objects.sort_unstable();
    assert_eq!(objects, vec![4, 9]);
}

/// A shard parked by a process that stopped before it read the resume (its
/// pause cleared behind its back) is released by the next worker to start:
/// nothing stays parked without a pause.
pub async fn a_shard_parked_under_a_pause_that_is_gone_is_released_at_startup<B: Backend>(
    backend: &B,
) {
    let store = backend.fresh("orphan_pause").await;
    let shard = org(1);
    backend.write(&store, &[update(&shard, 1, 0)]).await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    let gone = drainer(store.clone(), &recorder, &clock, DrainConfig::default());
    let target = ControlTarget::Shard(shard.clone());
    gone.operator().pause(target.clone(), None).await.unwrap();
    assert_eq!(
        gone.drain_due(OutboxKind::Region).await.unwrap().deliveries,
        0
    );
    drop(gone);
    assert!(store.clear_control(&target).await.unwrap());
    let failing = store.failing_shards(OutboxKind::Region, 10).await.unwrap();
    assert!(failing[0].state.is_paused(), "still parked");

    let next = backend.reconnect(&store).await;
    let started = drainer(next, &recorder, &clock, DrainConfig::default());
    started.operator().release_orphaned_pauses().await.unwrap();
    assert_eq!(
        started
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .deliveries,
        1
    );
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

/// The admin snapshot holds what the separate reads hold (read in one
/// transaction, its parts agree): pending rows, the deepest shards, the
/// failing ones and the number of dead letters; the per-scope depths and
/// the dead-letter count that the backlog gauges read agree with it.
pub async fn an_admin_snapshot_agrees_with_the_separate_reads<B: Backend>(backend: &B) {
    let store = backend.fresh("snapshot").await;
    let event = NewRow {
        shard: audit(5),
        category: OutboxCategory::AuditLogEvent,
        object: 5,
        payload: None,
        payload_version: None,
    };
    backend
        .write(
            &store,
            &[
                update(&org(1), 1, 0),
                update(&org(1), 1, 1),
                update(&org(2), 2, 0),
                event,
            ],
        )
        .await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    recorder.fail_when(|message| message.object_identifier != 2);
    let drainer = drainer_builder(store.clone(), &recorder, &clock, DrainConfig::default())
        .dead_letter(OutboxScope::AuditLogScope, 1)
        .build();
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.deliveries, report.dead_lettered), (1, 1));

    let snapshot = store
        .snapshot(OutboxKind::Region, 10, DEFAULT_COUNT_CAP)
        .await
        .unwrap();
    assert_eq!(snapshot.kind, OutboxKind::Region);
    assert_eq!(snapshot.pending, Count::Exact(2));
    assert_eq!(snapshot.deepest.len(), 1);
    assert_eq!(
        (&snapshot.deepest[0].shard, snapshot.deepest[0].depth),
        (&org(1), Count::Exact(2))
    );
    assert_eq!(snapshot.failing.len(), 1);
    assert_eq!(snapshot.failing[0].shard, org(1));
    assert_eq!(snapshot.failing[0].state.attempts, 1);
    assert_eq!(snapshot.dead_letters, Count::Exact(1));
    assert_eq!(
        snapshot.deepest,
        store.shard_depths(OutboxKind::Region, 10).await.unwrap()
    );
    assert_eq!(
        snapshot.failing,
        store.failing_shards(OutboxKind::Region, 10).await.unwrap()
    );
    let control = store
        .snapshot(OutboxKind::Control, 10, DEFAULT_COUNT_CAP)
        .await
        .unwrap();
    assert_eq!(
        (control.pending, control.dead_letters),
        (Count::Exact(0), Count::Exact(0))
    );
    assert!(control.deepest.is_empty() && control.failing.is_empty());

    // The per-scope depths and the dead-letter count (the gauges' reads).
    assert_eq!(
        store.dead_letter_count(OutboxKind::Region).await.unwrap(),
        1
    );
    assert_eq!(
        store.dead_letter_count(OutboxKind::Control).await.unwrap(),
        0
    );
    let scopes = store.scope_depths(OutboxKind::Region).await.unwrap();
    let depths: Vec<(i32, Count)> = scopes.iter().map(|s| (s.scope, s.depth)).collect();
    assert_eq!(depths, vec![(0, Count::Exact(2))]);
    assert_eq!(
        scopes[0].oldest_date_added,
        snapshot.deepest[0].oldest_date_added
    );
    assert!(store
        .scope_depths(OutboxKind::Control)
        .await
        .unwrap()
        .is_empty());
    let backlog = drainer.view().backlog(OutboxKind::Region).await.unwrap();
    assert_eq!(backlog.dead_letters, Count::Exact(1));
    assert_eq!(backlog.depth, Count::Exact(2));
    let by_scope: Vec<(i32, Option<&str>, Count, bool)> = backlog
        .scopes
        .iter()
        .map(|s| (s.scope, s.scope_name, s.depth, s.oldest_age.is_some()))
        .collect();
    assert_eq!(
        by_scope,
        vec![
            (0, Some("OrganizationScope"), Count::Exact(2), true),
            (2, Some("AuditLogScope"), Count::Exact(0), false)
        ],
        "every declared scope, 0 where nothing is pending"
    );
}

/// The operators' audit log: records listed newest first up to a limit,
/// every field as written (text of any length and characters, a NUL
/// included, cut to the store's bound), and records older than the
/// retention removed when the next one is written.
pub async fn the_audit_log_keeps_what_operators_did_for_its_retention<B: Backend>(backend: &B) {
    use outbox_core::audit::{AuditEntry, FIELD_MAX};

    let store = backend.fresh("audit_log").await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    let drainer = drainer(store.clone(), &recorder, &clock, DrainConfig::default());
    let (operator, view) = (drainer.operator(), drainer.view());
    let day = Duration::from_secs(24 * 3600);

    let mut first = AuditEntry::new(clock.now(), "ann", "operator", "pause");
    first.target = Some("region OrgScope(0)/1".to_owned());
    first.reason = Some("deploy \u{0}é".to_owned() + &"x".repeat(FIELD_MAX));
    operator.record(&first, 7 * day).await.unwrap();
    clock.advance(day);
    let mut refused = AuditEntry::new(clock.now(), "bob", "viewer", "cull");
    refused.outcome = "forbidden".to_owned();
    refused.detail = Some("a viewer cannot act".to_owned());
    operator.record(&refused, 7 * day).await.unwrap();

    let log = view.audit_log(10).await.unwrap();
    assert_eq!(log.len(), 2);
    assert!(log[0].id > log[1].id, "newest first");
    assert_eq!(log[0].entry, refused);
    let stored = &log[1].entry;
    assert_eq!(stored.actor, "ann");
    assert_eq!(stored.target, first.target);
    let reason = stored.reason.as_deref().unwrap();
    assert!(reason.starts_with("deploy \u{fffd}é"), "{reason:?}");
    assert_eq!(reason.chars().count(), FIELD_MAX + 1);
    assert_eq!(view.audit_log(1).await.unwrap()[0].entry, refused);

    // Six days later the first is 7 days old: kept; a second more, removed
    // as the next is written.
    clock.advance(6 * day);
    let third = AuditEntry::new(clock.now(), "ann", "operator", "resume");
    operator.record(&third, 7 * day).await.unwrap();
    assert_eq!(view.audit_log(10).await.unwrap().len(), 3);
    clock.advance(Duration::from_secs(1));
    let fourth = AuditEntry::new(clock.now(), "cli:root", "cli", "retry");
    operator.record(&fourth, 7 * day).await.unwrap();
    let actions: Vec<String> = view
        .audit_log(10)
        .await
        .unwrap()
        .into_iter()
        .map(|record| record.entry.action)
        .collect();
    assert_eq!(actions, ["retry", "resume", "cull"]);
}

/// A quarantined shard's head message (its coalescing group) moved to the
/// dead letters by an operator: the rest of the shard flows at once, the
/// moved rows are dead letters a replay brings back; while a worker holds
/// the shard nothing is moved.
pub async fn a_blocked_shards_head_set_aside_lets_the_rest_flow<B: Backend>(backend: &B) {
    use std::time::Duration;

    let store = backend.fresh("set_aside").await;
    let shard = org(1);
    let ids = backend
        .write(
            &store,
            &[
                update(&shard, 7, 1),
                update(&shard, 8, 2),
                update(&shard, 7, 3),
            ],
        )
        .await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    recorder.fail_permanently_when(|message| message.object_identifier == 7);
    let drainer = drainer(store.clone(), &recorder, &clock, DrainConfig::default());
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    let (view, operator) = (drainer.view(), drainer.operator());

    let head = view.head(&shard).await.unwrap().expect("a pending head");
    assert_eq!(head.row.id, ids[0]);
    assert_eq!(head.group, [ids[0], ids[2]], "its coalescing group");
    assert!(
        head.state
            .as_ref()
            .is_some_and(outbox_core::store::ShardState::is_quarantined),
        "{head:?}"
    );
    assert!(view.head(&org(2)).await.unwrap().is_none());

    let moved = operator
        .set_aside(&shard, &head.group, "set aside by ann: bad payload")
        .await
        .unwrap();
    assert_eq!(moved, Some(2));
    let dead = view.dead_letters(OutboxKind::Region, 10).await.unwrap();
    let dead_ids: Vec<i64> = dead.iter().map(|d| d.row.id).collect();
    assert_eq!(dead_ids, [ids[0], ids[2]]);
    assert!(dead[0].error.contains("bad payload"));
    assert!(view
        .failing_shards(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());

    // The rest flows now, without waiting for a backoff.
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert!(report.failures.is_empty(), "{report:?}");
    let delivered: Vec<i64> = recorder.deliveries().iter().map(|d| d.object).collect();
    assert!(delivered.contains(&8), "{delivered:?}");
    assert!(!delivered.contains(&7));

    // Replayed, the moved rows are delivered (the receiver fixed).
    recorder.stop_failing();
    operator
        .replay_dead_letters(OutboxKind::Region, &dead_ids)
        .await
        .unwrap();
    clock.advance(Duration::from_secs(1));
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert!(recorder.deliveries().iter().any(|d| d.object == 7));
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

/// While a worker's round holds a shard's bucket, setting its head aside
/// changes nothing (`None`): the operator tries again.
pub async fn a_head_is_not_set_aside_while_a_worker_holds_its_shard<B: Backend>(backend: &B) {
    let store = backend.fresh("set_aside_held").await;
    let shard = org(1);
    let ids = backend.write(&store, &[update(&shard, 7, 1)]).await;
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    let gate = recorder.hold_when(|message| message.object_identifier == 7);
    let drainer = drainer(store.clone(), &recorder, &clock, DrainConfig::default());
    let round = tokio::spawn({
        let drainer = drainer.clone();
        async move { drainer.drain_due(OutboxKind::Region).await.unwrap() }
    });
    gate.reached(1).await;
    let moved = drainer
        .operator()
        .set_aside(&shard, &ids, "while held")
        .await
        .unwrap();
    assert_eq!(moved, None);
    gate.open();
    assert_eq!(round.await.unwrap().deliveries, 1);
    assert!(drainer
        .view()
        .dead_letters(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());
}
