//! The `payload_version` column through the write API and the stores, on
//! PostgreSQL and SQLite: written by `OutboxMessage::typed`, NULL for an
//! untyped write, read back by claims (the background claim from the scan
//! watermark too), kept by the dead-letter move and the replay; a stored
//! value no writer stores is read as a version no receiver knows; an
//! untyped write of a typed category is refused and writes nothing; the
//! migration goes down and up on tables that hold rows. (Every claim path,
//! dead letters and parked shards are also in the conformance suite,
//! `outbox_testing::conformance::payload_version`.)

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use chrono::Utc;
use outbox_core::store::{ClaimOrder, ClaimRequest, DrainStore, StoreAdmin};
use outbox_core::{Drainer, OutboxKind};
use outbox_seaorm::entity::{outbox_dead_letter, region_outbox};
use outbox_seaorm::store::SeaOrmStore;
use outbox_seaorm::{
    write_control, write_region, write_region_many, ObjectId, OutboxMessage, ShardId, WriteError,
};
use outbox_testing::conformance::{
    outbox_categories, OrganizationName, OrganizationNameV1, OutboxCategory, OutboxScope,
};
use outbox_testing::database::TestDatabase;
use outbox_testing::Recorder;
use sea_orm::{ConnectionTrait, DbBackend, EntityTrait, Statement};

fn name(name: &str) -> OrganizationName {
    OrganizationName {
        name: name.to_owned(),
        slug: name.to_lowercase(),
    }
}

fn renamed(shard: i64, object: i64, to: &str) -> OutboxMessage<OutboxCategory> {
    OutboxMessage::typed(
        outbox_categories::OrganizationRenamed,
        ShardId(shard),
        ObjectId(object),
        &name(to),
    )
    .unwrap()
}

fn update(shard: i64, object: i64) -> OutboxMessage<OutboxCategory> {
    OutboxMessage::new(
        OutboxCategory::OrganizationUpdate,
        ShardId(shard),
        ObjectId(object),
    )
}

async fn stored_versions(t: &TestDatabase, table: &str) -> Vec<Option<i32>> {
    let backend = t.db.get_database_backend();
    t.db.query_all_raw(Statement::from_string(
        backend,
        format!("SELECT payload_version FROM {table} ORDER BY id"),
    ))
    .await
    .unwrap()
    .iter()
    .map(|row| row.try_get::<Option<i32>>("", "payload_version").unwrap())
    .collect()
}

async fn pending(t: &TestDatabase) -> u64 {
    t.store().pending_count(OutboxKind::Region).await.unwrap()
}

/// A typed write stores its contract's version, an untyped one NULL, in
/// both outbox tables; the entities and the stores read them back, and a
/// dead letter and its replay keep them.
#[outbox_testing::test]
async fn a_typed_write_stores_its_version_through_dead_letters_and_replay(t: TestDatabase) {
    let store = t.store();
    let typed = write_region(&t.db, renamed(1, 1, "Acme")).await.unwrap();
    let untyped = write_region(&t.db, update(2, 2)).await.unwrap();
    let control = write_control(&t.db, ["us"], renamed(3, 3, "Beta"))
        .await
        .unwrap();
    assert_eq!(stored_versions(&t, "region_outbox").await, [Some(2), None]);
    assert_eq!(stored_versions(&t, "control_outbox").await, [Some(2)]);
    let entities: Vec<(i64, Option<i32>)> = region_outbox::Entity::find()
        .all(&t.db)
        .await
        .unwrap()
        .iter()
        .map(|row| (row.id, row.payload_version))
        .collect();
    assert_eq!(entities, [(typed.id, Some(2)), (untyped.id, None)]);

    // Refused once: the scope dead-letters at once, version and all.
    let recorder = Recorder::<OutboxCategory>::new();
    recorder.fail_when(|_| true);
    let drainer = Drainer::builder(store.clone(), recorder.receivers())
        .dead_letter(OutboxScope::OrganizationScope, 1)
        .build();
    for kind in OutboxKind::ALL {
        drainer.drain_due(kind).await.unwrap();
    }
    let mut dead = outbox_dead_letter::Entity::find().all(&t.db).await.unwrap();
    dead.sort_by_key(|row| (row.kind, row.id));
    let dead: Vec<(i16, i64, Option<i32>)> = dead
        .iter()
        .map(|row| (row.kind, row.id, row.payload_version))
        .collect();
    assert_eq!(
        dead,
        [
            (0, typed.id, Some(2)),
            (0, untyped.id, None),
            (1, control[0].id, Some(2))
        ]
    );
    let listed: Vec<(i64, Option<u32>)> = store
        .dead_letters(OutboxKind::Region, 10)
        .await
        .unwrap()
        .iter()
        .map(|dead| (dead.row.id, dead.row.payload_version))
        .collect();
    assert_eq!(listed, [(typed.id, Some(2)), (untyped.id, None)]);

    // Replayed: back in the outbox with it, and delivered with it.
    store
        .replay_dead_letters(OutboxKind::Region, &[typed.id, untyped.id])
        .await
        .unwrap();
    store
        .replay_dead_letters(OutboxKind::Control, &[control[0].id])
        .await
        .unwrap();
    assert_eq!(stored_versions(&t, "region_outbox").await, [Some(2), None]);
    assert_eq!(stored_versions(&t, "control_outbox").await, [Some(2)]);
    recorder.stop_failing();
    for kind in OutboxKind::ALL {
        drainer.drain_due(kind).await.unwrap();
    }
    let mut delivered: Vec<(i64, Option<u32>)> = recorder
        .deliveries()
        .iter()
        .map(|delivery| (delivery.object, delivery.payload_version))
        .collect();
    delivered.sort_unstable();
    assert_eq!(delivered, [(1, Some(2)), (2, None), (3, Some(2))]);
}

/// What a hand (or another program) stored: NULL reads as `None`; a
/// negative version, one above `u32::MAX` and, on SQLite, a value that is
/// no integer read as `u32::MAX`, a version no receiver knows, and no claim
/// fails on them.
#[outbox_testing::test]
async fn a_stored_version_no_writer_stores_reads_as_one_nobody_knows(t: TestDatabase) {
    let backend = t.db.get_database_backend();
    let mut written = Vec::new();
    for shard in 1..=4 {
        written.push(
            write_region(&t.db, renamed(shard, shard, "Acme"))
                .await
                .unwrap()
                .id,
        );
    }
    let mut values = vec!["NULL", "-1"];
    if backend == DbBackend::Sqlite {
        // SQLite keeps what it is given in an integer column.
        values.extend(["5000000000", "'two'"]);
    }
    for (id, value) in written.iter().zip(&values) {
        t.db.execute_unprepared(&format!(
            "UPDATE region_outbox SET payload_version = {value} WHERE id = {id}"
        ))
        .await
        .unwrap();
    }
    let now = Utc::now();
    let claim = t
        .store()
        .claim_due(&ClaimRequest {
            kind: OutboxKind::Region,
            now,
            lease_until: now,
            token: 1,
            owner: "test".into(),
            rows: 100,
            up_to_id: None,
            order: ClaimOrder::Oldest,
            beyond: 0,
            shard_rows: usize::MAX,
            held_rows: 0,
        })
        .await
        .unwrap();
    let mut read: Vec<(i64, Option<u32>)> = claim
        .shards
        .iter()
        .flat_map(|shard| &shard.rows)
        .map(|row| (row.id, row.payload_version))
        .collect();
    read.sort_unstable();
    let mut expected = vec![(written[0], None), (written[1], Some(u32::MAX))];
    if backend == DbBackend::Sqlite {
        expected.extend([(written[2], Some(u32::MAX)), (written[3], Some(u32::MAX))]);
    } else {
        expected.extend([(written[2], Some(2)), (written[3], Some(2))]);
    }
    assert_eq!(read, expected);
    let head = t
        .store()
        .shard_head(&outbox_testing::conformance::org(2), 10)
        .await
        .unwrap();
    assert_eq!(head[0].payload_version, Some(u32::MAX));
}

/// `OutboxMessage::new` of a typed category, a typed message whose payload
/// was replaced untyped, and a version the column cannot hold are refused
/// before any statement runs: nothing is written, not even the valid
/// messages of the same call, and the transaction stays usable.
#[outbox_testing::test]
async fn an_untyped_write_of_a_typed_category_is_refused_and_writes_nothing(t: TestDatabase) {
    let txn = outbox_seaorm::begin_write(&t.db).await.unwrap();
    let untyped = OutboxMessage::new(OutboxCategory::OrganizationRenamed, ShardId(1), ObjectId(1))
        .with_payload(serde_json::json!({ "name": "Acme" }));
    let error = write_region(&txn, untyped).await.unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(
            error,
            WriteError::UntypedWrite {
                category: "OrganizationRenamed",
                payload_type
            } if payload_type.ends_with("OrganizationName")
        ),
        "{error:?}"
    );
    assert!(text.contains("OutboxMessage::typed"), "{text}");
    assert!(format!("{error:?}").starts_with("WriteError::UntypedWrite: "));

    let replaced = renamed(1, 1, "Acme").with_payload(serde_json::json!({ "name": 7 }));
    assert_eq!(replaced.payload_version, None);
    let error = write_region_many(&txn, [update(2, 2), renamed(1, 1, "Acme"), replaced])
        .await
        .unwrap_err();
    assert!(
        matches!(error, WriteError::UntypedWrite { .. }),
        "{error:?}"
    );

    let mut too_high = renamed(1, 1, "Acme");
    too_high.payload_version = Some(u32::MAX);
    let error = write_control(&txn, ["us"], too_high).await.unwrap_err();
    assert!(
        matches!(
            error,
            WriteError::PayloadVersionOutOfRange {
                version: u32::MAX,
                ..
            }
        ),
        "{error:?}"
    );

    // Nothing was written, and the transaction goes on.
    let written = write_region(&txn, renamed(1, 1, "Acme")).await.unwrap();
    txn.commit().await.unwrap();
    assert_eq!(pending(&t).await, 1);
    let ids: Vec<i64> = region_outbox::Entity::find()
        .all(&t.db)
        .await
        .unwrap()
        .iter()
        .map(|row| row.id)
        .collect();
    assert_eq!(ids, [written.id]);
    assert_eq!(
        t.store().pending_count(OutboxKind::Control).await.unwrap(),
        0
    );
}

/// A writer built on an older contract (version 1 of the payload) stores
/// that version.
#[test]
fn typed_stores_the_version_of_the_contract_it_is_given() {
    use outbox_core::{Contract, TypedCategory};

    #[derive(Clone, Copy)]
    struct RenamedV1;
    impl TypedCategory for RenamedV1 {
        type Category = OutboxCategory;
        type Payload = OrganizationNameV1;
        const CATEGORY: OutboxCategory = OutboxCategory::OrganizationRenamed;
    }
    let message = OutboxMessage::typed(
        RenamedV1,
        ShardId(1),
        ObjectId(1),
        &OrganizationNameV1 {
            name: "Acme".into(),
        },
    )
    .unwrap();
    assert_eq!(message.payload_version, Some(OrganizationNameV1::VERSION));
    assert_eq!(message.payload, Some(serde_json::json!({ "name": "Acme" })));
    assert_eq!(message.category, OutboxCategory::OrganizationRenamed);
}

/// On PostgreSQL the background claim from the scan watermark
/// (`claim_due_above.sql`) reads the version too.
#[outbox_testing::test(postgres)]
async fn a_claim_from_the_scan_watermark_reads_the_version(t: TestDatabase) {
    let SeaOrmStore::Postgres(store) = t.store() else {
        panic!("a PostgreSQL store");
    };
    let store = store.scan_from_watermark_after(Duration::ZERO);
    let request = |now, token| ClaimRequest {
        kind: OutboxKind::Region,
        now,
        lease_until: now,
        token,
        owner: format!("test-{token}"),
        rows: 100,
        up_to_id: None,
        order: ClaimOrder::Oldest,
        beyond: 0,
        shard_rows: usize::MAX,
        held_rows: 0,
    };
    // Rows written and delivered, claim after claim: the watermark rises.
    let mut at = Utc::now();
    for token in 1..=4 {
        let id = write_region(&t.db, update(2, token)).await.unwrap().id;
        let claim = store.claim_due(&request(at, token)).await.unwrap();
        assert_eq!(claim.rows(), 1);
        t.db.execute_unprepared(&format!("DELETE FROM region_outbox WHERE id = {id}"))
            .await
            .unwrap();
        at += chrono::Duration::milliseconds(300);
    }
    assert!(store.scan_watermark(OutboxKind::Region).is_some());
    // Less than a second after the last claim from the very start: this
    // one scans from the watermark.
    let typed = write_region(&t.db, renamed(1, 1, "Acme")).await.unwrap();
    let untyped = write_region(&t.db, update(3, 3)).await.unwrap();
    let claim = store.claim_due(&request(at, 10)).await.unwrap();
    let mut read: Vec<(i64, Option<u32>)> = claim
        .shards
        .iter()
        .flat_map(|shard| &shard.rows)
        .map(|row| (row.id, row.payload_version))
        .collect();
    read.sort_unstable();
    assert_eq!(read, [(typed.id, Some(2)), (untyped.id, None)]);
}

/// Migrates down past the payload version migration (and any after it).
async fn down_past_payload_version(db: &sea_orm::DatabaseConnection) {
    use sea_orm_migration::{MigrationName, MigratorTrait};
    let after = outbox_migrations::migrations()
        .iter()
        .rev()
        .position(|m| m.name() == outbox_migrations::PayloadVersion.name())
        .unwrap() as u32;
    outbox_migrations::OutboxMigrator::down(db, Some(after + 1))
        .await
        .unwrap();
}

/// The migration goes down (dropping the column, the rows staying) and up
/// again on tables that hold rows: the rows that were there read as
/// untyped writes; typed writes work again.
#[outbox_testing::test]
async fn the_payload_version_migration_goes_down_and_up_with_rows(t: TestDatabase) {
    use sea_orm_migration::MigratorTrait;
    write_region(&t.db, renamed(1, 1, "Acme")).await.unwrap();
    write_control(&t.db, ["us"], renamed(2, 2, "Beta"))
        .await
        .unwrap();
    down_past_payload_version(&t.db).await;
    let backend = t.db.get_database_backend();
    for table in ["region_outbox", "control_outbox", "outbox_dead_letter"] {
        let gone =
            t.db.query_all_raw(Statement::from_string(
                backend,
                format!("SELECT payload_version FROM {table}"),
            ))
            .await;
        assert!(gone.is_err(), "{table}: the column is gone");
    }
    assert!(outbox_seaorm::check_schema(&t.db).await.is_err());
    assert_eq!(pending(&t).await, 1, "the rows stay");
    outbox_migrations::OutboxMigrator::up(&t.db, None)
        .await
        .unwrap();
    outbox_seaorm::check_schema(&t.db).await.unwrap();
    write_region(&t.db, renamed(1, 1, "Delta")).await.unwrap();
    assert_eq!(stored_versions(&t, "region_outbox").await, [None, Some(2)]);
    assert_eq!(stored_versions(&t, "control_outbox").await, [None]);
}
