//! Message ids on PostgreSQL and SQLite: assigned at write time, delivered
//! as written (the winner's under coalescing), kept by dead letters and their
//! replay, stable for rows written without one, and given to the rows that a
//! table already holds when the migration runs.

#![allow(clippy::unwrap_used, missing_docs)]

use sea_orm_migration::MigrationName;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use outbox_core::store::StoreAdmin;
use outbox_core::uuid::Uuid;
use outbox_core::{Drainer, HandlerError, Message, OutboxKind, Receivers};
use outbox_seaorm::{
    write_control, write_region, write_region_many, ObjectId, OutboxMessage, ShardId,
};
use outbox_testing::conformance::{OutboxCategory, OutboxScope};
use outbox_testing::database::{DbBackend, TestDatabase};
use outbox_testing::Recorder;
use sea_orm::{ConnectionTrait, Statement};
use sea_orm_migration::MigratorTrait;

/// The stored message ids of `table` in id order (`None` for null).
async fn stored_ids(t: &TestDatabase, table: &str) -> Vec<Option<Uuid>> {
    let backend = t.db.get_database_backend();
    let select = format!("SELECT message_id FROM {table} ORDER BY id");
    t.db.query_all_raw(Statement::from_string(backend, select))
        .await
        .unwrap()
        .iter()
        .map(|row| row.try_get::<Option<Uuid>>("", "message_id").unwrap())
        .collect()
}

fn update(object: i64) -> OutboxMessage<OutboxCategory> {
    OutboxMessage::new(
        OutboxCategory::OrganizationUpdate,
        ShardId(1),
        ObjectId(object),
    )
}

/// Every row written gets its own v7 id, returned by the write, stored, and
/// delivered; coalesced rows deliver the newest row's id.
async fn written_ids_are_stored_and_delivered(backend: DbBackend) {
    let t = TestDatabase::of(backend, "message_ids").await.unwrap();
    let written = write_region_many(&t.db, [update(1), update(2), update(1), update(1)])
        .await
        .unwrap();
    let ids: Vec<Uuid> = written.iter().map(|row| row.message_id).collect();
    assert!(ids.iter().all(|id| id.get_version_num() == 7), "{ids:?}");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 4, "distinct");
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(sorted, ids, "time-ordered in write order");
    assert_eq!(
        stored_ids(&t, "region_outbox").await,
        ids.iter().copied().map(Some).collect::<Vec<_>>()
    );
    let control = write_control(&t.db, ["us", "eu"], update(3)).await.unwrap();
    assert_ne!(
        control[0].message_id, control[1].message_id,
        "one per region"
    );

    let recorder = Recorder::<OutboxCategory>::new();
    let drainer = Drainer::new(t.store(), recorder.receivers());
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    drainer.drain_due(OutboxKind::Control).await.unwrap();
    let mut delivered: Vec<(i64, Uuid)> = recorder
        .deliveries()
        .iter()
        .map(|d| (d.object, d.message_id))
        .collect();
    delivered.sort();
    let mut expected = vec![(1, ids[3]), (2, ids[1])];
    expected.extend(control.iter().map(|row| (3, row.message_id)));
    expected.sort();
    assert_eq!(delivered, expected, "object 1 delivers its newest row's id");
}

/// A refused message is dead-lettered with its id, listed with it, and
/// replayed with it.
async fn dead_letters_and_replay_keep_the_id(backend: DbBackend) {
    let t = TestDatabase::of(backend, "message_ids_dead").await.unwrap();
    let store = t.store();
    let message = OutboxMessage::new(OutboxCategory::AuditLogEvent, ShardId(9), ObjectId(9));
    let written = write_region(&t.db, message).await.unwrap();
    let recorder = Recorder::<OutboxCategory>::new();
    recorder.fail_when(|_| true);
    let drainer = Drainer::builder(store.clone(), recorder.receivers())
        .dead_letter(OutboxScope::AuditLogScope, 1)
        .build();
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    let dead = store.dead_letters(OutboxKind::Region, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].row.message_id, written.message_id);

    store
        .replay_dead_letters(OutboxKind::Region, &[written.id])
        .await
        .unwrap();
    assert_eq!(
        stored_ids(&t, "region_outbox").await,
        [Some(written.message_id)]
    );
    recorder.stop_failing();
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(recorder.deliveries()[0].message_id, written.message_id);
}

/// A row without a stored id (an older binary wrote it) is delivered with a
/// derived id, the same on every delivery; on SQLite, text that is not a
/// UUID is read the same way instead of failing the claim.
async fn a_row_without_an_id_gets_the_same_derived_id_each_time(backend: DbBackend) {
    let t = TestDatabase::of(backend, "message_ids_null").await.unwrap();
    let mut rows = vec![write_region(&t.db, update(5)).await.unwrap().id];
    t.db.execute_unprepared("UPDATE region_outbox SET message_id = NULL")
        .await
        .unwrap();
    if backend == DbBackend::Sqlite {
        let other = write_region(&t.db, update(6)).await.unwrap();
        t.db.execute_raw(Statement::from_sql_and_values(
            backend,
            "UPDATE region_outbox SET message_id = 'not a uuid' WHERE id = $1",
            [other.id.into()],
        ))
        .await
        .unwrap();
        rows.push(other.id);
    }
    // Every call's (object, message id); the first one of each object fails.
    let calls: Arc<Mutex<Vec<(i64, Uuid)>>> = Arc::default();
    let seen = calls.clone();
    let receivers = Receivers::new().on(
        OutboxCategory::OrganizationUpdate,
        move |message: Message<OutboxCategory>| {
            let seen = seen.clone();
            async move {
                let mut seen = seen.lock().unwrap();
                let first = !seen
                    .iter()
                    .any(|(object, _)| *object == message.object_identifier);
                seen.push((message.object_identifier, message.message_id));
                if first {
                    return Err(HandlerError::from("refused once"));
                }
                Ok(())
            }
        },
    );
    let drainer = Drainer::new(t.store(), receivers);
    // One failure per row, each released at once.
    let shard = update(5).region_shard();
    for _ in 0..rows.len() {
        assert!(drainer.drain_shard(&shard, None).await.is_err());
        drainer
            .operator()
            .retry_now(std::slice::from_ref(&shard))
            .await
            .unwrap();
    }
    drainer.drain_shard(&shard, None).await.unwrap();
    assert_eq!(
        t.store().pending_count(OutboxKind::Region).await.unwrap(),
        0
    );
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.len(), rows.len() * 2, "{calls:?}");
    for (object, row) in (5..).zip(&rows) {
        let ids: Vec<Uuid> = calls
            .iter()
            .filter(|c| c.0 == object)
            .map(|c| c.1)
            .collect();
        assert_eq!(
            ids[0], ids[1],
            "object {object}: the same id on every delivery"
        );
        // Derived: a v8 id that ends with the row id (under the variant bits).
        assert_eq!(ids[0].get_version_num(), 8);
        let tail = u64::from_be_bytes(ids[0].as_bytes()[8..].try_into().unwrap());
        assert_eq!(tail & (u64::MAX >> 2), *row as u64);
    }
}

/// The migration runs on tables that hold rows (more than one batch): every
/// row gets a distinct v7 id dated from its `date_added`.
async fn the_migration_gives_existing_rows_ids(backend: DbBackend) {
    let t = TestDatabase::of(backend, "message_ids_migration")
        .await
        .unwrap();
    // Back to before the message ids (the migrations after it go too).
    let after = outbox_migrations::migrations()
        .iter()
        .rev()
        .position(|m| m.name() == outbox_migrations::MessageIds.name())
        .unwrap() as u32;
    outbox_migrations::OutboxMigrator::down(&t.db, Some(after + 1))
        .await
        .unwrap();
    let rows = outbox_migrations::MessageIds::BATCH as i64 * 2 + 7;
    let added = match backend {
        DbBackend::Postgres => "'2026-01-02T03:04:05.678+00:00'::timestamptz",
        _ => "'2026-01-02T03:04:05.678000+00:00'",
    };
    t.db.execute_unprepared(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows}) \
         INSERT INTO region_outbox (shard_scope, shard_identifier, category, object_identifier, \
         scheduled_from, scheduled_for, date_added) \
         SELECT 0, i % 10, 1, i, {added}, {added}, {added} FROM n"
    ))
    .await
    .unwrap();
    t.db.execute_unprepared(&format!(
        "INSERT INTO outbox_dead_letter (kind, id, shard_scope, shard_identifier, category, \
         object_identifier, scheduled_from, scheduled_for, date_added, error, dead_lettered_at) \
         VALUES (0, 1, 0, 1, 1, 1, {added}, {added}, {added}, 'refused', {added}), \
                (1, 1, 0, 1, 1, 1, {added}, {added}, {added}, 'refused', {added})"
    ))
    .await
    .unwrap();
    outbox_migrations::OutboxMigrator::up(&t.db, None)
        .await
        .unwrap();

    let ids = stored_ids(&t, "region_outbox").await;
    assert_eq!(ids.len() as i64, rows);
    let ids: Vec<Uuid> = ids.into_iter().map(Option::unwrap).collect();
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len() as i64,
        rows,
        "distinct"
    );
    let millis = chrono::DateTime::parse_from_rfc3339("2026-01-02T03:04:05.678+00:00")
        .unwrap()
        .timestamp_millis() as u64;
    for id in &ids {
        assert_eq!(id.get_version_num(), 7);
        let (seconds, nanos) = id.get_timestamp().unwrap().to_unix();
        assert_eq!(
            seconds * 1000 + u64::from(nanos) / 1_000_000,
            millis,
            "{id}"
        );
    }
    let dead = t
        .store()
        .dead_letters(OutboxKind::Region, 10)
        .await
        .unwrap();
    assert_eq!(dead[0].row.message_id.get_version_num(), 7);
    let dead = t
        .store()
        .dead_letters(OutboxKind::Control, 10)
        .await
        .unwrap();
    assert_eq!(dead[0].row.message_id.get_version_num(), 7);
    // Delivered with the ids the migration gave them.
    let recorder = Recorder::<OutboxCategory>::new();
    let drainer = Drainer::new(t.store(), recorder.receivers());
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    let delivered: HashSet<Uuid> = recorder.deliveries().iter().map(|d| d.message_id).collect();
    assert_eq!(delivered, ids.into_iter().collect::<HashSet<_>>());
}

outbox_testing::on_both_backends!(
    written_ids_are_stored_and_delivered,
    dead_letters_and_replay_keep_the_id,
    a_row_without_an_id_gets_the_same_derived_id_each_time,
    the_migration_gives_existing_rows_ids,
);
