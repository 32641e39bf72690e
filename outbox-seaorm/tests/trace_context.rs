//! The `traceparent` column through the stores, on PostgreSQL and SQLite:
//! read by claims, kept by the dead-letter move and the replay, and ignored
//! (not an error) when it does not parse. (The spans themselves are tested
//! in `outbox-core/tests/trace.rs` and `outbox-axum/tests/trace.rs`.)

#![allow(clippy::unwrap_used, missing_docs)]

use outbox_core::store::StoreAdmin;
use outbox_core::{Drainer, OutboxKind, TraceParent};
use outbox_seaorm::entity::outbox_dead_letter;
use outbox_seaorm::{write_control, write_region, ObjectId, OutboxMessage, ShardId};
use outbox_testing::conformance::{OutboxCategory, OutboxScope};
use outbox_testing::database::{DbBackend, TestDatabase};
use outbox_testing::Recorder;
use sea_orm::{ConnectionTrait, EntityTrait, Statement};

const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

async fn set_traceparent(t: &TestDatabase, table: &str, id: i64, value: &str) {
    let backend = t.db.get_database_backend();
    t.db.execute_raw(Statement::from_sql_and_values(
        backend,
        format!("UPDATE {table} SET traceparent = $1 WHERE id = $2"),
        [value.into(), id.into()],
    ))
    .await
    .unwrap();
}

async fn stored_traceparents(t: &TestDatabase, table: &str) -> Vec<Option<String>> {
    let backend = t.db.get_database_backend();
    t.db.query_all_raw(Statement::from_string(
        backend,
        format!("SELECT traceparent FROM {table} ORDER BY id"),
    ))
    .await
    .unwrap()
    .iter()
    .map(|row| row.try_get::<Option<String>>("", "traceparent").unwrap())
    .collect()
}

/// Rows written outside any OpenTelemetry span store NULL; a valid stored
/// value reaches the receiver, through a dead letter and its replay; a
/// garbage one is delivered all the same, without a trace context.
async fn a_traceparent_survives_claims_dead_letters_and_replay(backend: DbBackend) {
    let t = TestDatabase::of(backend, "trace_context").await.unwrap();
    let store = t.store();
    let mut ids = Vec::new();
    for object in [1, 2] {
        let message = OutboxMessage::new(
            OutboxCategory::AuditLogEvent,
            ShardId(object),
            ObjectId(object),
        );
        ids.push(write_region(&t.db, message).await.unwrap().id);
    }
    let control = write_control(
        &t.db,
        ["us"],
        OutboxMessage::new(OutboxCategory::AuditLogEvent, ShardId(3), ObjectId(3)),
    )
    .await
    .unwrap()[0]
        .id;
    assert_eq!(stored_traceparents(&t, "region_outbox").await, [None, None]);
    assert_eq!(stored_traceparents(&t, "control_outbox").await, [None]);
    set_traceparent(&t, "region_outbox", ids[0], VALID).await;
    set_traceparent(&t, "region_outbox", ids[1], "garbage; DROP TABLE x").await;
    set_traceparent(&t, "control_outbox", control, VALID).await;

    // Refused once: the audit scope dead-letters at once, value and all.
    let recorder = Recorder::<OutboxCategory>::new();
    recorder.fail_when(|_| true);
    let drainer = Drainer::builder(store.clone(), recorder.receivers())
        .dead_letter(OutboxScope::AuditLogScope, 1)
        .build();
    for kind in [OutboxKind::Region, OutboxKind::Control] {
        drainer.drain_due(kind).await.unwrap();
    }
    let mut dead = outbox_dead_letter::Entity::find().all(&t.db).await.unwrap();
    dead.sort_by_key(|row| (row.kind, row.id));
    let dead: Vec<(i16, Option<&str>)> = dead
        .iter()
        .map(|row| (row.kind, row.traceparent.as_deref()))
        .collect();
    assert_eq!(
        dead,
        [
            (0, Some(VALID)),
            (0, Some("garbage; DROP TABLE x")),
            (1, Some(VALID))
        ]
    );
    let listed = store.dead_letters(OutboxKind::Region, 10).await.unwrap();
    let parsed: Option<TraceParent> = VALID.parse().ok();
    let mut listed: Vec<(i64, Option<TraceParent>)> = listed
        .iter()
        .map(|dead| (dead.row.id, dead.row.traceparent))
        .collect();
    listed.sort_unstable_by_key(|(id, _)| *id);
    assert_eq!(listed, [(ids[0], parsed), (ids[1], None)]);

    // Replayed: back in the outbox with their traceparent, delivered.
    store
        .replay_dead_letters(OutboxKind::Region, &ids)
        .await
        .unwrap();
    store
        .replay_dead_letters(OutboxKind::Control, &[control])
        .await
        .unwrap();
    assert_eq!(
        stored_traceparents(&t, "control_outbox").await,
        [Some(VALID.to_owned())]
    );
    recorder.stop_failing();
    for kind in [OutboxKind::Region, OutboxKind::Control] {
        drainer.drain_due(kind).await.unwrap();
    }
    let mut delivered: Vec<(i64, Option<TraceParent>)> = recorder
        .deliveries()
        .iter()
        .map(|delivery| (delivery.object, delivery.traceparent))
        .collect();
    delivered.sort_unstable_by_key(|(object, _)| *object);
    assert_eq!(delivered, [(1, parsed), (2, None), (3, parsed)]);
}

/// Migrates down past the trace context migration (and the ones after it).
async fn down_past_trace_context(db: &sea_orm::DatabaseConnection) {
    use sea_orm_migration::{MigrationName, MigratorTrait};
    let after = outbox_migrations::migrations()
        .iter()
        .rev()
        .position(|m| m.name() == outbox_migrations::TraceContext.name())
        .unwrap() as u32;
    outbox_migrations::OutboxMigrator::down(db, Some(after + 1))
        .await
        .unwrap();
}

/// The migration goes down (dropping the columns) and up again, on tables
/// that hold rows.
async fn the_trace_context_migration_goes_down_and_up_with_rows(backend: DbBackend) {
    use sea_orm_migration::MigratorTrait;
    let t = TestDatabase::of(backend, "trace_migration").await.unwrap();
    let message = OutboxMessage::new(OutboxCategory::AuditLogEvent, ShardId(1), ObjectId(1));
    let id = write_region(&t.db, message.clone()).await.unwrap().id;
    set_traceparent(&t, "region_outbox", id, VALID).await;
    down_past_trace_context(&t.db).await;
    let backend = t.db.get_database_backend();
    let gone =
        t.db.query_all_raw(Statement::from_string(
            backend,
            "SELECT traceparent FROM region_outbox",
        ))
        .await;
    assert!(gone.is_err(), "the column is gone");
    outbox_migrations::OutboxMigrator::up(&t.db, None)
        .await
        .unwrap();
    // The row that was there has no traceparent; new rows work as before.
    write_region(&t.db, message).await.unwrap();
    assert_eq!(stored_traceparents(&t, "region_outbox").await, [None, None]);
}

/// One pool migrates down past the trace context migration; the migration
/// then goes up again on another pool, whose only connection read the
/// outbox table before. On SQLite a connection checks an `ALTER TABLE`
/// against the schema it cached when it last read: without a fresh read
/// first, it would find the dropped column still there ("duplicate column
/// name"), as a pooled connection did once in CI.
async fn a_pool_that_read_the_schema_before_another_migrated_down_migrates_up(backend: DbBackend) {
    use sea_orm_migration::{MigrationTrait, SchemaManager};
    let t = TestDatabase::of(backend, "trace_migration_pools")
        .await
        .unwrap();
    let select = |sql: &str| Statement::from_string(t.db.get_database_backend(), sql);
    let stale = t.connect_again(1).await.unwrap();
    stale
        .query_all_raw(select("SELECT traceparent FROM region_outbox"))
        .await
        .unwrap();
    down_past_trace_context(&t.db).await;
    // The migration itself, on the stale connection (the migrator would
    // read its table first, on that same connection).
    outbox_migrations::TraceContext
        .up(&SchemaManager::new(&stale))
        .await
        .unwrap();
    stale
        .query_all_raw(select("SELECT traceparent FROM region_outbox"))
        .await
        .unwrap();
}

outbox_testing::on_both_backends!(
    a_traceparent_survives_claims_dead_letters_and_replay,
    the_trace_context_migration_goes_down_and_up_with_rows,
    a_pool_that_read_the_schema_before_another_migrated_down_migrates_up,
);
