//! What the store tells operators: an outbox table's upkeep, and the
//! entities of the dead-letter and control tables.

#![allow(missing_docs, clippy::unwrap_used)]

use outbox_core::store::{HorizonHolderKind, StoreAdmin};
use outbox_core::OutboxKind;
use outbox_testing::database::TestDatabase;
use sea_orm::ConnectionTrait;

/// On PostgreSQL: the table's dead tuples, and the age of another session's
/// open transaction while it holds back vacuum, gone when it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_reports_dead_tuples_and_a_transaction_holding_back_vacuum() {
    let t = TestDatabase::postgres("table_health").await.unwrap();
    let store = t.store();
    let health = store.table_health(OutboxKind::Region).await.unwrap();
    assert!(health.dead_tuples.is_some(), "{health:?}");
    assert_eq!(
        health.oldest_transaction_age, None,
        "nobody else is in a transaction"
    );

    let other = t.connect_again(1).await.unwrap();
    other.execute_unprepared("BEGIN").await.unwrap();
    other
        .execute_unprepared("SELECT txid_current()")
        .await
        .unwrap();
    let health = store.table_health(OutboxKind::Control).await.unwrap();
    assert!(health.oldest_transaction_age.is_some(), "{health:?}");
    // Named, with what an operator needs to end it.
    let holder = health.horizon.expect("a holder");
    assert_eq!(holder.kind, HorizonHolderKind::Session);
    assert!(holder.pid.is_some() && holder.age.is_some(), "{holder:?}");
    assert_eq!(holder.state.as_deref(), Some("idle in transaction"));

    other.execute_unprepared("ROLLBACK").await.unwrap();
    let health = store.table_health(OutboxKind::Region).await.unwrap();
    assert_eq!(health.oldest_transaction_age, None);
    assert_eq!(health.horizon, None);
    other.close().await.unwrap();
}

/// SQLite has neither to tell.
#[tokio::test]
async fn sqlite_reports_nothing_it_cannot_know() {
    let t = TestDatabase::sqlite("table_health").await.unwrap();
    let health = t.store().table_health(OutboxKind::Region).await.unwrap();
    assert_eq!(
        (
            health.dead_tuples,
            health.oldest_transaction_age,
            health.horizon
        ),
        (None, None, None)
    );
}

/// The entities of the dead-letter and control tables read what the store
/// wrote, on both backends.
async fn the_dead_letter_and_control_entities_read_the_tables(
    backend: outbox_testing::database::DbBackend,
) {
    use chrono::Utc;
    use outbox_core::{ControlAction, ControlTarget, RuntimeControl, ShardKey};
    use outbox_seaorm::entity::{outbox_control, outbox_dead_letter};
    use sea_orm::EntityTrait;

    let t = TestDatabase::of(backend, "entities").await.unwrap();
    let store = t.store();
    let shard = ShardKey::from_raw(OutboxKind::Control, 3, 7, Some("us".into()));
    store
        .set_control(&RuntimeControl {
            target: ControlTarget::Shard(shard),
            action: ControlAction::Pause,
            reason: Some("look".into()),
            created_at: Utc::now(),
        })
        .await
        .unwrap();
    let controls = outbox_control::Entity::find().all(&t.db).await.unwrap();
    assert_eq!(controls.len(), 1);
    let control = &controls[0];
    assert_eq!(
        (
            control.kind,
            control.region_name.as_str(),
            control.shard_scope,
            control.whole_scope,
            control.shard_identifier,
            control.action
        ),
        (1, "us", 3, false, 7, 1)
    );
    assert_eq!(control.reason.as_deref(), Some("look"));

    // A dead letter: an audit event refused once, in a scope that
    // dead-letters after one attempt.
    use outbox_testing::conformance::{OutboxCategory, OutboxScope};
    use outbox_testing::Recorder;
    let id = outbox_seaorm::write_region(
        &t.db,
        outbox_seaorm::OutboxMessage::new(
            OutboxCategory::AuditLogEvent,
            outbox_seaorm::ShardId(5),
            outbox_seaorm::ObjectId(5),
        )
        .with_payload(serde_json::json!({ "v": 5 })),
    )
    .await
    .unwrap();
    let recorder = Recorder::<OutboxCategory>::new();
    recorder.fail_when(|_| true);
    let drainer = outbox_core::Drainer::builder(store.clone(), recorder.receivers())
        .dead_letter(OutboxScope::AuditLogScope, 1)
        .build();
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.dead_lettered, 1);
    let dead = outbox_dead_letter::Entity::find().all(&t.db).await.unwrap();
    assert_eq!(dead.len(), 1);
    let row = &dead[0];
    assert_eq!(
        (
            row.kind,
            row.id,
            row.shard_scope,
            row.shard_identifier,
            row.category,
            row.object_identifier
        ),
        (0, id.id, 2, 5, 20, 5)
    );
    assert_eq!(row.payload, Some(serde_json::json!({ "v": 5 })));
    assert!(!row.error.is_empty());
    assert!(row.dead_lettered_at >= row.date_added, "{row:?}");
}

outbox_testing::on_both_backends!(the_dead_letter_and_control_entities_read_the_tables);

/// PostgreSQL: the migrations set the outbox tables' autovacuum to act on
/// 1,000 dead tuples plus 1 % (not the default 20 %), on each partition of
/// the ring when it is opted into (a partitioned table stores none), and
/// take it back when migrated down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_tables_vacuum_early() {
    use outbox_migrations::{OutboxMigrator, OutboxRingMigrator};
    use sea_orm_migration::MigratorTrait;
    let t = TestDatabase::postgres("autovacuum").await.unwrap();
    // Each table that holds the rows (the partitions, or the plain table).
    let options = || async {
        let rows =
            t.db.query_all_raw(sea_orm::Statement::from_string(
                sea_orm::DbBackend::Postgres,
                "SELECT c.relname::text AS table, array_to_string(c.reloptions, ',') AS options \
                 FROM pg_class c \
                 WHERE c.relkind = 'r' AND (c.relname IN ('region_outbox', 'control_outbox') \
                    OR c.oid IN (SELECT inhrelid FROM pg_inherits \
                                 WHERE inhparent IN ('region_outbox'::regclass, \
                                                     'control_outbox'::regclass))) \
                 ORDER BY c.relname",
            ))
            .await
            .unwrap();
        rows.iter()
            .map(|row| {
                (
                    row.try_get::<String>("", "table").unwrap(),
                    row.try_get::<Option<String>>("", "options").unwrap(),
                )
            })
            .collect::<Vec<_>>()
    };
    let set =
        Some("autovacuum_vacuum_threshold=1000,autovacuum_vacuum_scale_factor=0.01".to_owned());
    let expected = |tables: &[&str], options: Option<String>| {
        tables
            .iter()
            .map(|table| ((*table).to_owned(), options.clone()))
            .collect::<Vec<_>>()
    };
    let ring = [
        "control_outbox_p0",
        "control_outbox_p1",
        "control_outbox_p2",
        "region_outbox_p0",
        "region_outbox_p1",
        "region_outbox_p2",
    ];
    let plain = ["control_outbox", "region_outbox"];
    assert_eq!(options().await, expected(&plain, set.clone()));
    // The partition ring (opted into) sets them on each partition, and
    // puts them back on the plain tables when migrated down.
    OutboxRingMigrator::up(&t.db, None).await.unwrap();
    assert_eq!(options().await, expected(&ring, set.clone()));
    OutboxRingMigrator::down(&t.db, Some(1)).await.unwrap();
    assert_eq!(options().await, expected(&plain, set.clone()));
    // Down to just before them (later migrations come off first).
    let after = outbox_migrations::migrations()
        .iter()
        .rev()
        .position(|migration| migration.name() == "m20261126_000012_outbox_autovacuum")
        .unwrap();
    OutboxMigrator::down(&t.db, Some(u32::try_from(after + 1).unwrap()))
        .await
        .unwrap();
    assert_eq!(options().await, expected(&plain, None));
    OutboxMigrator::up(&t.db, None).await.unwrap();
    assert_eq!(options().await, expected(&plain, set));
}
