//! Backfills on PostgreSQL and SQLite: gating, versions, resume, rate limit.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;

use outbox_core::store::StoreAdmin;
use outbox_core::{HandlerError, OutboxKind, Receivers};
use outbox_seaorm::backfill::{set_target_version, Backfill};
use outbox_seaorm::entity::{control_outbox, region_outbox};
use outbox_seaorm::replication::{ControlReplication, RegionReplication};
use outbox_testing::database::TestDatabase;
use sea_orm::{ConnectionTrait, DbBackend, DbErr, EntityTrait};

outbox_core::registry! {
    OrganizationScope = 0 (shard_field = "organization_id") {
        WidgetUpdate = 1,
        GadgetUpdate = 2,
    }
}

macro_rules! widget_model {
    ($module:ident, $version:literal) => {
        pub mod $module {
            use super::*;
            use sea_orm::entity::prelude::*;

            #[derive(
                Clone,
                Debug,
                PartialEq,
                DeriveEntityModel,
                outbox_seaorm::replication::ReplicatedRegionModel,
            )]
            #[sea_orm(table_name = "widget")]
            #[outbox(category = OutboxCategory::WidgetUpdate, replication_version = $version)]
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
                async fn handle_async_replication(
                    &self,
                    _: &(),
                    _: i64,
                ) -> Result<(), HandlerError> {
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
    };
}

// The same table, before and after its replication changed.
widget_model!(widget_v1, 1);
widget_model!(widget_v2, 2);

pub mod gadget {
    use super::*;
    use sea_orm::entity::prelude::*;

    /// A control model replicated to two regions.
    #[derive(
        Clone,
        Debug,
        PartialEq,
        DeriveEntityModel,
        outbox_seaorm::replication::ReplicatedControlModel,
    )]
    #[sea_orm(table_name = "gadget")]
    #[outbox(category = OutboxCategory::GadgetUpdate)]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        pub organization_id: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}

    #[async_trait::async_trait]
    impl ControlReplication for Model {
        async fn outbox_region_names<C: ConnectionTrait>(
            &self,
            _db: &C,
        ) -> Result<Vec<String>, DbErr> {
            Ok(vec!["us".into(), "de".into()])
        }
        async fn handle_async_replication(
            &self,
            _: &(),
            _: &str,
            _: i64,
        ) -> Result<(), HandlerError> {
            Ok(())
        }
        async fn handle_async_deletion(
            _: &(),
            _: &str,
            _: i64,
            _: i64,
            _: Option<serde_json::Value>,
        ) -> Result<(), HandlerError> {
            Ok(())
        }
    }
}

const ROWS: i64 = 25;

/// A database with 25 widgets and 4 gadgets that predate their outboxes.
async fn database(backend: DbBackend, label: &str) -> TestDatabase {
    let db = TestDatabase::of(backend, label).await.unwrap();
    for table in ["widget", "gadget"] {
        db.db
            .execute_unprepared(&format!(
                "CREATE TABLE {table} (id bigint PRIMARY KEY, organization_id bigint NOT NULL)"
            ))
            .await
            .unwrap();
    }
    for id in 1..=ROWS {
        // Sparse ids: 3, 6, 9, ...
        db.db
            .execute_unprepared(&format!(
                "INSERT INTO widget (id, organization_id) VALUES ({}, {})",
                id * 3,
                id % 4
            ))
            .await
            .unwrap();
    }
    for id in 1..=4 {
        db.db
            .execute_unprepared(&format!(
                "INSERT INTO gadget (id, organization_id) VALUES ({id}, 1)"
            ))
            .await
            .unwrap();
    }
    db
}

/// How many outbox rows each widget id has.
async fn widget_rows(db: &TestDatabase) -> BTreeMap<i64, usize> {
    let mut counts = BTreeMap::new();
    for row in region_outbox::Entity::find().all(&db.db).await.unwrap() {
        *counts.entry(row.object_identifier).or_default() += 1;
    }
    counts
}

async fn drain(db: &TestDatabase) {
    let receivers = Receivers::<OutboxCategory>::new()
        .discard(OutboxCategory::WidgetUpdate)
        .discard(OutboxCategory::GadgetUpdate);
    let drainer = outbox_core::Drainer::new(db.store(), receivers);
    outbox_testing::drain_until_idle(&drainer, &OutboxKind::ALL)
        .await
        .unwrap();
}

/// A pool of one connection (SeaORM's default for SQLite): each batch reads
/// and writes in its own transaction only, never waiting for a second
/// connection the batch itself holds.
async fn a_pool_of_one_connection_backfills(backend: DbBackend) {
    let db = database(backend, "backfill_one_connection").await;
    set_target_version(&db.db, "widget", 1).await.unwrap();
    let one = db.connect_again(1).await.unwrap();
    let backfill = Backfill::new().model::<widget_v1::Model>().batch_size(10);
    let report = backfill.tick(&one).await.unwrap();
    assert_eq!(report.backfilled, ROWS as u64);
    let status = backfill.status(&one).await.unwrap();
    assert!(status[0].done, "{status:?}");
    one.close().await.unwrap();
}

async fn an_unset_option_backfills_nothing(backend: DbBackend) {
    let db = database(backend, "backfill_unset").await;
    let backfill = Backfill::new().model::<widget_v2::Model>();
    let report = backfill.tick(&db.db).await.unwrap();
    assert_eq!(report.backfilled, 0);
    assert_eq!(
        db.store().pending_count(OutboxKind::Region).await.unwrap(),
        0
    );
    let status = backfill.status(&db.db).await.unwrap();
    assert_eq!((status[0].target_version, status[0].done), (None, false));
}

async fn each_version_backfills_every_row_exactly_once(backend: DbBackend) {
    let db = database(backend, "backfill_versions").await;
    set_target_version(&db.db, "widget", 1).await.unwrap();
    let v1 = Backfill::new().model::<widget_v1::Model>().batch_size(10);
    let report = v1.tick(&db.db).await.unwrap();
    assert_eq!(report.backfilled, ROWS as u64);
    let counts = widget_rows(&db).await;
    assert_eq!(counts.len(), ROWS as usize);
    assert!(counts.values().all(|n| *n == 1), "{counts:?}");
    assert_eq!(
        v1.tick(&db.db).await.unwrap().backfilled,
        0,
        "done for version 1"
    );
    let status = v1.status(&db.db).await.unwrap();
    assert_eq!(
        (
            status[0].done,
            status[0].cursor_version,
            status[0].rows_remaining
        ),
        (true, Some(2), 0)
    );
    drain(&db).await;

    // The code moves to version 2; the option still says 1: nothing yet.
    let v2 = Backfill::new().model::<widget_v2::Model>().batch_size(10);
    assert_eq!(v2.tick(&db.db).await.unwrap().backfilled, 0);
    assert_eq!(v2.status(&db.db).await.unwrap()[0].target_version, Some(1));
    // Rolled out: every row once more.
    set_target_version(&db.db, "widget", 2).await.unwrap();
    assert_eq!(
        v2.status(&db.db).await.unwrap()[0].rows_remaining,
        ROWS as u64
    );
    assert_eq!(v2.tick(&db.db).await.unwrap().backfilled, ROWS as u64);
    assert!(widget_rows(&db).await.values().all(|n| *n == 1));
    assert_eq!(v2.tick(&db.db).await.unwrap().backfilled, 0);
    // An option above the coded version is capped by it.
    set_target_version(&db.db, "widget", 9).await.unwrap();
    assert_eq!(v2.status(&db.db).await.unwrap()[0].target_version, Some(2));
    assert_eq!(v2.tick(&db.db).await.unwrap().backfilled, 0);
}

async fn an_interrupted_backfill_resumes_from_its_cursor(backend: DbBackend) {
    let db = database(backend, "backfill_resume").await;
    set_target_version(&db.db, "widget", 1).await.unwrap();
    // The first process gets through two batches (a budget of 8 rows).
    let first = Backfill::new()
        .model::<widget_v1::Model>()
        .batch_size(12)
        .rows_per_minute(8);
    assert_eq!(first.tick(&db.db).await.unwrap().backfilled, 8);
    let status = first.status(&db.db).await.unwrap();
    assert_eq!(status[0].rows_remaining, ROWS as u64 - 8);
    assert!(status[0].lower_bound_id > 0);
    // A new process, a bigger budget: it continues where the cursor is.
    let second = Backfill::new().model::<widget_v1::Model>().batch_size(12);
    assert_eq!(
        second.tick(&db.db).await.unwrap().backfilled,
        ROWS as u64 - 8
    );
    let counts = widget_rows(&db).await;
    assert_eq!(counts.len(), ROWS as usize);
    assert!(counts.values().all(|n| *n == 1), "no row twice: {counts:?}");
}

async fn the_rate_limit_caps_each_tick_and_shrinks_with_pending_rows(backend: DbBackend) {
    let db = database(backend, "backfill_rate").await;
    set_target_version(&db.db, "widget", 1).await.unwrap();
    let backfill = Backfill::new()
        .model::<widget_v1::Model>()
        .batch_size(5)
        .rows_per_minute(12);
    let report = backfill.tick(&db.db).await.unwrap();
    assert_eq!((report.budget, report.backfilled), (12, 12));
    // 12 rows are pending: no budget left.
    let report = backfill.tick(&db.db).await.unwrap();
    assert_eq!((report.budget, report.backfilled), (0, 0));
    drain(&db).await;
    // Pending rows from elsewhere shrink the budget too.
    outbox_seaorm::write_region_many(
        &db.db,
        (0..5).map(|i| {
            outbox_seaorm::OutboxMessage::new(
                OutboxCategory::GadgetUpdate,
                outbox_seaorm::ShardId(99),
                outbox_seaorm::ObjectId(i),
            )
        }),
    )
    .await
    .unwrap();
    let report = backfill.tick(&db.db).await.unwrap();
    assert_eq!((report.budget, report.backfilled), (7, 7));
}

async fn control_models_backfill_one_row_per_region(backend: DbBackend) {
    let db = database(backend, "backfill_control").await;
    let backfill = Backfill::new()
        .model::<widget_v1::Model>()
        .model::<gadget::Model>()
        .force(true);
    let report = backfill.run_to_completion(&db.db, |_, _| {}).await.unwrap();
    assert_eq!(report.tables, vec![("widget", ROWS as u64), ("gadget", 4)]);
    let control = control_outbox::Entity::find().all(&db.db).await.unwrap();
    assert_eq!(control.len(), 8, "4 gadgets x 2 regions");
    assert_eq!(
        backfill
            .run_to_completion(&db.db, |_, _| {})
            .await
            .unwrap()
            .backfilled,
        0,
        "force mode is done once"
    );
}

/// Each batch reads (option, cursor) and then writes; another connection
/// committing in between (the drain, a request) must not fail it. On SQLite a
/// deferred transaction would fail with `SQLITE_BUSY` there.
async fn batches_survive_other_writers_committing_meanwhile(backend: DbBackend) {
    let db = database(backend, "backfill_concurrent").await;
    db.db
        .execute_unprepared("CREATE TABLE noise (n bigint NOT NULL)")
        .await
        .unwrap();
    set_target_version(&db.db, "widget", 1).await.unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.db.clone(), stop.clone());
        tokio::spawn(async move {
            let mut commits = 0_u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                db.execute_unprepared("INSERT INTO noise (n) VALUES (1)")
                    .await
                    .unwrap();
                commits += 1;
                tokio::task::yield_now().await;
            }
            commits
        })
    };
    let backfill = Backfill::new().model::<widget_v1::Model>().batch_size(1);
    let report = backfill.tick(&db.db).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let commits = writer.await.unwrap();
    assert_eq!(report.unwrap().backfilled, ROWS as u64);
    assert!(commits > 0);
    let counts = widget_rows(&db).await;
    assert_eq!(counts.len(), ROWS as usize);
    assert!(counts.values().all(|n| *n == 1), "{counts:?}");
}

outbox_testing::on_both_backends!(
    a_pool_of_one_connection_backfills,
    batches_survive_other_writers_committing_meanwhile,
    an_unset_option_backfills_nothing,
    each_version_backfills_every_row_exactly_once,
    an_interrupted_backfill_resumes_from_its_cursor,
    the_rate_limit_caps_each_tick_and_shrinks_with_pending_rows,
    control_models_backfill_one_row_per_region,
);
