//! Payload versions (typed categories, `outbox_core::contract`): the
//! version a writer stored with a row is the one every read of the row
//! returns, through every claim, a dead letter and its replay; a shard
//! parked on a version its receiver does not know is listed and counted
//! apart from the shards that fail.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::{
    drainer_builder, org, outbox_categories, renamed, update, Backend, NewRow, OrganizationName,
    OutboxCategory, OutboxScope,
};
use crate::Recorder;
use outbox_core::clock::{Clock, ManualClock};
use outbox_core::control::ControlTarget;
use outbox_core::drain::{DrainConfig, Drainer, DEFAULT_COUNT_CAP};
use outbox_core::message::StoredRow;
use outbox_core::shard::{OutboxKind, ShardKey};
use outbox_core::store::{
    ClaimOrder, ClaimRequest, DrainStore, ShardClaim, ShardStatus, StoreAdmin,
};
use outbox_core::{HandlerError, Message, Receivers};

/// A claim of the region outbox at `now` whose leases end at once: the
/// next claim at `now` finds every bucket free again.
fn request(now: chrono::DateTime<chrono::Utc>, token: i64, order: ClaimOrder) -> ClaimRequest {
    ClaimRequest {
        kind: OutboxKind::Region,
        now,
        lease_until: now,
        token,
        owner: format!("payload-version-{token}"),
        rows: 100,
        up_to_id: None,
        order,
        beyond: 0,
        shard_rows: usize::MAX,
        held_rows: 0,
    }
}

/// Each row's id and payload version.
fn versions<'a>(rows: impl IntoIterator<Item = &'a StoredRow>) -> BTreeMap<i64, Option<u32>> {
    rows.into_iter()
        .map(|row| (row.id, row.payload_version))
        .collect()
}

/// The rows of claims that must all have leased their shard.
fn claimed<'a>(claims: impl IntoIterator<Item = &'a ShardClaim>) -> Vec<&'a StoredRow> {
    claims
        .into_iter()
        .flat_map(|claim| match claim {
            ShardClaim::Claimed(shard) => shard.rows.iter(),
            other => panic!("not claimed: {other:?}"),
        })
        .collect()
}

/// Rows written with a version (this contract's, the one before it, one
/// no receiver here knows) and without one (an untyped category) are read
/// back with it by the background claims from either end, the synchronous
/// flush after a commit, its claims before a commit (of one shard and of
/// several, beside rows the transaction wrote) and a shard's head.
pub async fn a_payload_version_is_read_back_by_every_claim<B: Backend>(backend: &B) {
    let store = backend.fresh("payload_version_claims").await;
    let rows = [
        renamed(&org(1), 1, "Acme", Some(2)),
        renamed(&org(2), 2, "Beta", Some(1)),
        update(&org(3), 3, 0),
        renamed(&org(4), 4, "Gamma", Some(7)),
    ];
    let ids = backend.write(&store, &rows).await;
    let written: BTreeMap<i64, Option<u32>> = ids
        .iter()
        .zip(&rows)
        .map(|(id, row)| (*id, row.payload_version))
        .collect();
    assert_eq!(
        written.values().copied().collect::<Vec<_>>(),
        [Some(2), Some(1), None, Some(7)]
    );
    let now = chrono::Utc::now();

    for (token, order) in [(1, ClaimOrder::Oldest), (2, ClaimOrder::Newest)] {
        let claim = store.claim_due(&request(now, token, order)).await.unwrap();
        assert_eq!(
            versions(claim.shards.iter().flat_map(|shard| &shard.rows)),
            written,
            "the background claim from the {order:?} end"
        );
    }

    let mut flushed = Vec::new();
    for (token, row) in (3..).zip(&rows) {
        flushed.push(
            store
                .claim_shard(&request(now, token, ClaimOrder::Oldest), &row.shard)
                .await
                .unwrap(),
        );
    }
    assert_eq!(
        versions(claimed(&flushed)),
        written,
        "the flush after a commit"
    );

    let mut head = Vec::new();
    for row in &rows {
        head.extend(store.shard_head(&row.shard, 10).await.unwrap());
    }
    assert_eq!(versions(&head), written, "the shards' heads");

    // A request's transaction writes more, and claims before its commit:
    // one shard, then two, each with the rows committed before.
    let mut txn = backend.begin(&store).await;
    let more = [
        renamed(&org(1), 5, "Delta", Some(2)),
        renamed(&org(2), 6, "Epsilon", Some(9)),
        update(&org(4), 7, 1),
    ];
    let more_ids = txn.write(&more).await;
    let mut expected = BTreeMap::new();
    for (id, row) in more_ids.iter().zip(&more) {
        expected.insert(*id, row.payload_version);
    }
    let request = request(now, 20, ClaimOrder::Oldest);
    let one = txn
        .claim_before_commit(&request, &[(org(1), more_ids[0])])
        .await
        .unwrap();
    let two = txn
        .claim_before_commit(
            &ClaimRequest {
                token: 21,
                ..request.clone()
            },
            &[(org(2), more_ids[1]), (org(4), more_ids[2])],
        )
        .await
        .unwrap();
    txn.rollback().await;
    for (id, version) in &written {
        if *id != ids[2] {
            expected.insert(*id, *version);
        }
    }
    assert_eq!(
        versions(claimed(one.iter().chain(&two))),
        expected,
        "the claims before a commit"
    );
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 4);
}

/// Rows dead-lettered keep their version, in the dead letters' list and
/// back in the outbox once replayed, and are delivered with it.
pub async fn a_dead_letter_and_its_replay_keep_the_payload_version<B: Backend>(backend: &B) {
    let store = backend.fresh("payload_version_dead_letters").await;
    let rows = [
        renamed(&org(1), 1, "Acme", Some(2)),
        renamed(&org(2), 2, "Beta", Some(7)),
        update(&org(3), 3, 0),
    ];
    let ids = backend.write(&store, &rows).await;
    let written: BTreeMap<i64, Option<u32>> = ids
        .iter()
        .zip(&rows)
        .map(|(id, row)| (*id, row.payload_version))
        .collect();

    // Refused once: the scope dead-letters at once.
    let clock = ManualClock::starting_now();
    let recorder = Recorder::new();
    recorder.fail_when(|_| true);
    let drainer = drainer_builder(store.clone(), &recorder, &clock, DrainConfig::default())
        .dead_letter(OutboxScope::OrganizationScope, 1)
        .build();
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
    let dead = store.dead_letters(OutboxKind::Region, 10).await.unwrap();
    assert_eq!(
        versions(dead.iter().map(|dead| &dead.row)),
        written,
        "the dead letters"
    );

    assert_eq!(
        store
            .replay_dead_letters(OutboxKind::Region, &ids)
            .await
            .unwrap(),
        3
    );
    let mut head = Vec::new();
    for row in &rows {
        head.extend(store.shard_head(&row.shard, 10).await.unwrap());
    }
    assert_eq!(versions(&head), written, "replayed");

    recorder.stop_failing();
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    let delivered: BTreeMap<i64, Option<u32>> = recorder
        .deliveries()
        .iter()
        .map(|delivery| (delivery.id, delivery.payload_version))
        .collect();
    assert_eq!(delivered, written, "delivered after the replay");
}

/// A typed receiver that knows versions 1 and 2 parks the shards of
/// versions 3 and 9 (a producer deployed ahead of it) and delivers a
/// version 1 upcast; `parked_shards` lists exactly the parked shards, next
/// attempt first, and the backlog counts them apart from the shard that
/// backs off after a failure and the one an operator paused.
pub async fn parked_shards_are_listed_and_counted_apart<B: Backend>(backend: &B) {
    let store = backend.fresh("parked_shards").await;
    let (ahead, known, failing, paused, further_ahead) = (org(1), org(2), org(3), org(4), org(5));
    let rows: [NewRow; 5] = [
        renamed(&ahead, 1, "Acme", Some(3)),
        renamed(&known, 2, "Beta", Some(1)),
        update(&failing, 3, 0),
        update(&paused, 4, 0),
        renamed(&further_ahead, 5, "Gamma", Some(9)),
    ];
    backend.write(&store, &rows).await;
    assert!(store
        .parked_shards(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());

    let clock = ManualClock::starting_now();
    let recorder = Recorder::<OutboxCategory>::new();
    recorder.fail_when(|message| message.object_identifier == 3);
    let decoded: Arc<Mutex<Vec<(i64, OrganizationName)>>> = Arc::default();
    let receivers = Receivers::new()
        .on_typed(outbox_categories::OrganizationRenamed, {
            let decoded = decoded.clone();
            move |message: Message<OutboxCategory>, name: OrganizationName| {
                decoded
                    .lock()
                    .unwrap()
                    .push((message.object_identifier, name));
                async { Ok::<(), HandlerError>(()) }
            }
        })
        .on(OutboxCategory::OrganizationUpdate, {
            let recorder = recorder.clone();
            move |message| {
                let recorder = recorder.clone();
                async move { recorder.handle(message).await }
            }
        });
    let drainer = Drainer::builder(store.clone(), receivers)
        .clock(clock.clone())
        .config(DrainConfig::default())
        .build();
    drainer
        .operator()
        .pause(ControlTarget::Shard(paused.clone()), Some("hold".into()))
        .await
        .unwrap();
    for _ in 0..10 {
        if drainer
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .is_empty()
        {
            break;
        }
    }
    assert_eq!(
        *decoded.lock().unwrap(),
        [(
            2,
            OrganizationName {
                name: "Beta".into(),
                slug: "beta".into()
            }
        )],
        "version 1, upcast"
    );

    let shards = |listed: &[outbox_core::store::FailingShard]| -> Vec<ShardKey> {
        listed.iter().map(|shard| shard.shard.clone()).collect()
    };
    let parked = store.parked_shards(OutboxKind::Region, 10).await.unwrap();
    assert_eq!(shards(&parked), [ahead.clone(), further_ahead.clone()]);
    for shard in &parked {
        assert!(shard.state.is_parked(), "{shard:?}");
        assert_eq!(shard.state.status(), ShardStatus::Parked);
        assert!(
            shard
                .state
                .next_attempt()
                .is_some_and(|at| at > clock.now()),
            "{shard:?}"
        );
    }
    assert_eq!(
        shards(&store.parked_shards(OutboxKind::Region, 1).await.unwrap()),
        std::slice::from_ref(&ahead),
        "at most the limit, next attempt first"
    );
    assert!(store
        .parked_shards(OutboxKind::Control, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        shards(
            &drainer
                .view()
                .parked_shards(OutboxKind::Region, 10)
                .await
                .unwrap()
        ),
        shards(&parked)
    );
    let mut failing_shards = shards(&store.failing_shards(OutboxKind::Region, 10).await.unwrap());
    failing_shards.sort();
    assert_eq!(
        failing_shards,
        [ahead, failing, paused, further_ahead],
        "every shard with a state"
    );

    let reading = store
        .read_backlog(OutboxKind::Region, DEFAULT_COUNT_CAP)
        .await
        .unwrap();
    assert_eq!(
        (
            reading.failing_shards,
            reading.parked_shards,
            reading.paused_shards,
            reading.quarantined_shards
        ),
        (1, 2, 1, 0),
        "backing off, parked, paused, quarantined"
    );
    let backlog = drainer.view().backlog(OutboxKind::Region).await.unwrap();
    assert_eq!((backlog.failing_shards, backlog.parked_shards), (1, 2));
}
