//! Replicated models of a typed category, on PostgreSQL and SQLite: the
//! derive takes the registry's payload type, each save and delete records
//! its contract's version, and a rolling deploy parks the tombstone a
//! receiver cannot read until the build that knows its version drains it,
//! older tombstones upcast. (Untyped models keep `serde_json::Value`:
//! `tests/replication.rs`.)

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::{DrainConfig, Drainer, ManualClock, OutboxKind, Receivers};
use outbox_seaorm::replication::ReplicationReceivers;
use outbox_seaorm::SeaOrmStore;
use outbox_testing::contracts::{OrgV2, OrgV3};
use outbox_testing::database::{DbBackend, TestDatabase};
use sea_orm::{ActiveModelTrait, ConnectionTrait, Set, Statement};

const PARK: Duration = Duration::from_secs(30);

/// What a build's handlers saw: replications (object ids) and tombstones
/// with their payload.
pub struct Seen<T> {
    replicated: Mutex<Vec<i64>>,
    tombstones: Mutex<Vec<(i64, Option<T>)>>,
}

impl<T> Default for Seen<T> {
    fn default() -> Self {
        Self {
            replicated: Mutex::default(),
            tombstones: Mutex::default(),
        }
    }
}

impl<T: Clone> Seen<T> {
    fn tombstones(&self) -> Vec<(i64, Option<T>)> {
        let mut seen = self.tombstones.lock().unwrap().clone();
        seen.sort_by_key(|(object, _)| *object);
        seen
    }
}

/// One build of the producer and receiver: its registry declares
/// `OrgUpdate` with `$payload`, and its `org` model writes `$build`.
macro_rules! build {
    ($name:ident, $payload:ty, |$model:ident| $build:expr) => {
        pub mod $name {
            use super::*;

            outbox_core::registry! {
                OrgScope = 0 (shard_field = "organization_id", owner_table = "org") {
                    OrgUpdate = 1 (payload = $payload),
                }
            }

            pub mod org {
                use super::*;
                use outbox_core::HandlerError;
                use outbox_seaorm::replication::{RegionReplication, ReplicatedRegionModel};
                use sea_orm::entity::prelude::*;

                #[derive(Clone, Debug, PartialEq, DeriveEntityModel, ReplicatedRegionModel)]
                #[sea_orm(table_name = "org")]
                #[outbox(
                                                            category = OutboxCategory::OrgUpdate,
                                                            context = Seen<$payload>,
                                                            active_model_behavior
                                                        )]
                pub struct Model {
                    #[sea_orm(primary_key)]
                    pub id: i64,
                    pub name: String,
                    pub seats: i32,
                }

                #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
                pub enum Relation {}

                #[async_trait::async_trait]
                impl RegionReplication for Model {
                    fn payload_for_update(&self) -> Option<$payload> {
                        let $model = self;
                        Some($build)
                    }

                    async fn handle_async_replication(
                        &self,
                        seen: &Seen<$payload>,
                        _shard: i64,
                    ) -> Result<(), HandlerError> {
                        seen.replicated.lock().unwrap().push(self.id);
                        Ok(())
                    }

                    async fn handle_async_deletion(
                        seen: &Seen<$payload>,
                        identifier: i64,
                        _shard: i64,
                        payload: Option<$payload>,
                    ) -> Result<(), HandlerError> {
                        seen.tombstones.lock().unwrap().push((identifier, payload));
                        Ok(())
                    }
                }
            }

            /// Saves the organization `id`, then deletes it when `delete`.
            pub async fn write(
                db: &sea_orm::DatabaseConnection,
                id: i64,
                name: &str,
                delete: bool,
            ) {
                let saved = org::ActiveModel {
                    id: Set(id),
                    name: Set(name.to_owned()),
                    seats: Set(id as i32),
                }
                .insert(db)
                .await
                .unwrap();
                if delete {
                    let active: org::ActiveModel = saved.into();
                    active.delete(db).await.unwrap();
                }
            }

            pub fn drainer(
                db: &sea_orm::DatabaseConnection,
                clock: &ManualClock,
                seen: Arc<Seen<$payload>>,
            ) -> Drainer<OutboxCategory> {
                let receivers = Receivers::new().replicate::<org::Model>(db.clone(), seen);
                receivers.ensure_complete().unwrap();
                Drainer::builder(SeaOrmStore::new(db.clone()).unwrap(), receivers)
                    .config(DrainConfig::default().park_interval(PARK))
                    .clock(clock.clone())
                    // A tombstone it cannot read must park, not dead-letter.
                    .dead_letter(OutboxScope::OrgScope, 1)
                    .build()
            }
        }
    };
}

// Last week's build, still draining; next week's, deployed first where the
// writes happen.
build!(last_week, OrgV2, |org| OrgV2 {
    name: org.name.clone(),
    seats: org.seats as u32,
});
build!(next_week, OrgV3, |org| OrgV3 {
    display_name: org.name.clone(),
    seats: org.seats as u32,
});

/// A control model of a typed category, replicated to two regions.
pub mod control {
    use super::*;

    outbox_core::registry! {
        UserScope = 1 (shard_field = "id", owner_table = "app_user") {
            UserUpdate = 10 (payload = OrgV2),
        }
    }

    pub mod app_user {
        use super::*;
        use outbox_core::HandlerError;
        use outbox_seaorm::replication::{ControlReplication, ReplicatedControlModel};
        use sea_orm::entity::prelude::*;

        #[derive(Clone, Debug, PartialEq, DeriveEntityModel, ReplicatedControlModel)]
        #[sea_orm(table_name = "app_user")]
        #[outbox(category = OutboxCategory::UserUpdate, context = Seen<(String, OrgV2)>, active_model_behavior)]
        pub struct Model {
            #[sea_orm(primary_key)]
            pub id: i64,
            pub name: String,
        }

        #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
        pub enum Relation {}

        #[async_trait::async_trait]
        impl ControlReplication for Model {
            async fn outbox_region_names<C: ConnectionTrait>(
                &self,
                _: &C,
            ) -> Result<Vec<String>, DbErr> {
                Ok(vec!["de".into(), "us".into()])
            }

            fn payload_for_update(&self) -> Option<OrgV2> {
                Some(OrgV2 {
                    name: self.name.clone(),
                    seats: 1,
                })
            }

            async fn handle_async_replication(
                &self,
                seen: &Seen<(String, OrgV2)>,
                _region: &str,
                _shard: i64,
            ) -> Result<(), HandlerError> {
                seen.replicated.lock().unwrap().push(self.id);
                Ok(())
            }

            async fn handle_async_deletion(
                seen: &Seen<(String, OrgV2)>,
                region: &str,
                identifier: i64,
                _shard: i64,
                payload: Option<OrgV2>,
            ) -> Result<(), HandlerError> {
                seen.tombstones
                    .lock()
                    .unwrap()
                    .push((identifier, payload.map(|user| (region.to_owned(), user))));
                Ok(())
            }
        }
    }
}

async fn database(backend: DbBackend, label: &str) -> TestDatabase {
    let t = TestDatabase::of(backend, label).await.unwrap();
    t.db.execute_unprepared(
        "CREATE TABLE org (id bigint PRIMARY KEY, name text NOT NULL, seats integer NOT NULL)",
    )
    .await
    .unwrap();
    t
}

/// `(object, version, payload)` of every outbox row, by id.
async fn rows(t: &TestDatabase) -> Vec<(i64, Option<i32>, Option<String>)> {
    let backend = t.db.get_database_backend();
    let cast = match backend {
        DbBackend::Postgres => "payload::text",
        _ => "CAST(payload AS text)",
    };
    t.db.query_all_raw(Statement::from_string(
        backend,
        format!("SELECT object_identifier, payload_version, {cast} AS payload FROM region_outbox ORDER BY id"),
    ))
    .await
    .unwrap()
    .into_iter()
    .map(|row| {
        (
            row.try_get("", "object_identifier").unwrap(),
            row.try_get("", "payload_version").unwrap(),
            row.try_get("", "payload").unwrap(),
        )
    })
    .collect()
}

async fn a_typed_model_writes_its_contract_and_version(backend: DbBackend) {
    let t = database(backend, "typed_repl_write").await;
    next_week::write(&t.db, 1, "Ahead", false).await;
    last_week::write(&t.db, 2, "Current", false).await;
    let rows = rows(&t).await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!((rows[0].0, rows[0].1), (1, Some(3)));
    let ahead: serde_json::Value = serde_json::from_str(rows[0].2.as_deref().unwrap()).unwrap();
    assert_eq!(
        ahead,
        serde_json::json!({ "display_name": "Ahead", "seats": 1 })
    );
    assert_eq!((rows[1].0, rows[1].1), (2, Some(2)));
    let current: serde_json::Value = serde_json::from_str(rows[1].2.as_deref().unwrap()).unwrap();
    assert_eq!(
        current,
        serde_json::json!({ "name": "Current", "seats": 2 })
    );

    // Each build's receiver accepts the versions its contract knows.
    let old = Receivers::new()
        .replicate::<last_week::org::Model>(t.db.clone(), Arc::new(Seen::default()));
    let new = Receivers::new()
        .replicate::<next_week::org::Model>(t.db.clone(), Arc::new(Seen::default()));
    assert_eq!(
        old.accepted_versions(last_week::OutboxCategory::OrgUpdate),
        Some(&[1, 2][..])
    );
    assert_eq!(
        new.accepted_versions(next_week::OutboxCategory::OrgUpdate),
        Some(&[1, 2, 3][..])
    );
}

async fn a_tombstone_from_a_producer_ahead_parks_until_the_upgrade(backend: DbBackend) {
    let t = database(backend, "typed_repl_rolling").await;
    // Shard 1: last week's tombstone. Shard 2: next week's. Shard 3: next
    // week's save, whose row still exists. Shard 5: next week's tombstone
    // without a payload (its version alone says who wrote it).
    last_week::write(&t.db, 1, "Old", true).await;
    next_week::write(&t.db, 2, "New", true).await;
    next_week::write(&t.db, 3, "Kept", false).await;
    next_week::write(&t.db, 5, "Bare", true).await;
    t.db.execute_unprepared("UPDATE region_outbox SET payload = NULL WHERE object_identifier = 5")
        .await
        .unwrap();

    let clock = ManualClock::starting_now();
    let old_seen = Arc::new(Seen::<OrgV2>::default());
    let old = last_week::drainer(&t.db, &clock, old_seen.clone());
    let report = old.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.failures.len(), 2, "{report:?}");
    assert!(
        report.failures.iter().all(|failure| !failure.dead_lettered),
        "{report:?}"
    );
    assert_eq!(
        old_seen.tombstones(),
        [(
            1,
            Some(OrgV2 {
                name: "Old".into(),
                seats: 1
            })
        )],
        "never the wrong type"
    );
    // A row that exists is replicated from its current state: no payload read.
    assert_eq!(*old_seen.replicated.lock().unwrap(), [3]);
    let parked = old
        .view()
        .parked_shards(OutboxKind::Region, 10)
        .await
        .unwrap();
    let mut shards: Vec<_> = parked.iter().map(|parked| parked.shard.clone()).collect();
    shards.sort();
    let shard = |id| outbox_core::ShardKey::region(last_week::OutboxScope::OrgScope, id);
    assert_eq!(shards, [shard(2), shard(5)], "{parked:?}");
    for parked in &parked {
        assert_eq!(parked.state.attempts, 0);
        let error = parked.state.last_error.as_deref().unwrap();
        assert!(
            error.contains("version 3") && error.contains("deploy the receiver"),
            "{error}"
        );
    }
    // Parked, not backing off: a drain within the interval leaves it be.
    let report = old.drain_due(OutboxKind::Region).await.unwrap();
    assert!(report.failures.is_empty(), "{report:?}");
    // Its save and its delete, both kept (coalesced once delivered).
    let kept: Vec<_> = rows(&t)
        .await
        .into_iter()
        .map(|(object, version, _)| (object, version))
        .collect();
    assert_eq!(
        kept,
        [(2, Some(3)), (2, Some(3)), (5, Some(3)), (5, Some(3))],
        "the parked tombstones are kept"
    );

    // Last week's build deletes once more before the upgrade.
    last_week::write(&t.db, 4, "Older", true).await;

    // The upgrade: next week's receiver, once the park interval is over.
    clock.advance(PARK + Duration::from_secs(1));
    let new_seen = Arc::new(Seen::<OrgV3>::default());
    let new = next_week::drainer(&t.db, &clock, new_seen.clone());
    let report = new.drain_due(OutboxKind::Region).await.unwrap();
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(
        new_seen.tombstones(),
        [
            (
                2,
                Some(OrgV3 {
                    display_name: "New".into(),
                    seats: 2
                })
            ),
            (
                4,
                Some(OrgV3 {
                    display_name: "Older".into(),
                    seats: 4
                })
            ),
            (5, None),
        ],
        "the parked tombstones, and last week's upcast"
    );
    assert!(rows(&t).await.is_empty());
    assert!(new
        .view()
        .parked_shards(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());
}

async fn a_typed_control_model_records_its_version_per_region(backend: DbBackend) {
    let t = database(backend, "typed_repl_control").await;
    t.db.execute_unprepared("CREATE TABLE app_user (id bigint PRIMARY KEY, name text NOT NULL)")
        .await
        .unwrap();
    let user = control::app_user::ActiveModel {
        id: Set(5),
        name: Set("Ann".into()),
    }
    .insert(&t.db)
    .await
    .unwrap();
    control::app_user::ActiveModel::from(user)
        .delete(&t.db)
        .await
        .unwrap();
    let backend = t.db.get_database_backend();
    let versions: Vec<(String, Option<i32>)> =
        t.db.query_all_raw(Statement::from_string(
            backend,
            "SELECT region_name, payload_version FROM control_outbox ORDER BY region_name, id",
        ))
        .await
        .unwrap()
        .into_iter()
        .map(|row| {
            (
                row.try_get("", "region_name").unwrap(),
                row.try_get("", "payload_version").unwrap(),
            )
        })
        .collect();
    assert_eq!(
        versions,
        [
            ("de".to_owned(), Some(2)),
            ("de".to_owned(), Some(2)),
            ("us".to_owned(), Some(2)),
            ("us".to_owned(), Some(2)),
        ]
    );
    let seen = Arc::new(Seen::<(String, OrgV2)>::default());
    let receivers =
        Receivers::new().replicate::<control::app_user::Model>(t.db.clone(), seen.clone());
    let report = Drainer::new(SeaOrmStore::new(t.db.clone()).unwrap(), receivers)
        .drain_due(OutboxKind::Control)
        .await
        .unwrap();
    assert!(report.failures.is_empty(), "{report:?}");
    let mut tombstones = seen.tombstones();
    tombstones.sort_by(|a, b| a.1.as_ref().map(|p| &p.0).cmp(&b.1.as_ref().map(|p| &p.0)));
    let ann = OrgV2 {
        name: "Ann".into(),
        seats: 1,
    };
    assert_eq!(
        tombstones,
        [
            (5, Some(("de".to_owned(), ann.clone()))),
            (5, Some(("us".to_owned(), ann))),
        ]
    );
}

outbox_testing::on_both_backends!(
    a_typed_model_writes_its_contract_and_version,
    a_tombstone_from_a_producer_ahead_parks_until_the_upgrade,
    a_typed_control_model_records_its_version_per_region,
);
