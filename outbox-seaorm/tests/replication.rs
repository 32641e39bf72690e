//! Replicated models on PostgreSQL and SQLite: hooks, receivers, tombstones,
//! fan-out, bulk helpers.

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};

use outbox_core::{Drainer, HandlerError, OutboxContext, OutboxKind, Receivers};
use outbox_seaorm::replication::{
    bulk_delete, bulk_insert, bulk_update, replicate_to_regions, ControlReplication,
    RegionReplication, ReplicationReceivers,
};
use outbox_seaorm::SeaOrmStore;
use outbox_testing::database::TestDatabase;
use outbox_testing::drain_until_idle;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, DbBackend, DbErr,
    EntityTrait, QueryFilter, Set, Statement, TransactionTrait,
};
use serde_json::{json, Value};

outbox_core::registry! {
    OrganizationScope = 0 (shard_field = "organization_id", owner_table = "organization") {
        OrganizationUpdate = 1,
        ProjectUpdate = 2,
    }
    UserScope = 1 (shard_field = "user_id", owner_table = "app_user") {
        UserUpdate = 10,
    }
}

/// What the handlers write to: the "other silo" (tables in the same database
/// here) and a log of tombstones.
pub struct Replica {
    db: DatabaseConnection,
    tombstones: Mutex<Vec<(i64, i64, Option<Value>)>>,
    replications: Mutex<Vec<(String, i64)>>,
}

pub mod organization {
    use super::*;
    use sea_orm::entity::prelude::*;

    #[derive(
        Clone,
        Debug,
        PartialEq,
        DeriveEntityModel,
        outbox_seaorm::replication::ReplicatedRegionModel,
    )]
    #[sea_orm(table_name = "organization")]
    #[outbox(category = OutboxCategory::OrganizationUpdate, context = Replica, active_model_behavior)]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        pub slug: String,
        pub name: String,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    #[async_trait::async_trait]
    impl RegionReplication for Model {
        fn payload_for_update(&self) -> Option<serde_json::Value> {
            Some(json!({ "slug": self.slug }))
        }

        async fn handle_async_replication(
            &self,
            replica: &Replica,
            shard: i64,
        ) -> Result<(), HandlerError> {
            replica
                .replications
                .lock()
                .unwrap()
                .push(("organization".into(), self.id));
            let backend = replica.db.get_database_backend();
            replica
                .db
                .execute_raw(Statement::from_sql_and_values(
                    backend,
                    "INSERT INTO organization_mapping (id, shard, slug, name) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (id) DO UPDATE SET slug = excluded.slug, name = excluded.name",
                    [self.id.into(), shard.into(), self.slug.clone().into(), self.name.clone().into()],
                ))
                .await?;
            Ok(())
        }

        async fn handle_async_deletion(
            replica: &Replica,
            identifier: i64,
            shard: i64,
            payload: Option<serde_json::Value>,
        ) -> Result<(), HandlerError> {
            replica
                .tombstones
                .lock()
                .unwrap()
                .push((identifier, shard, payload));
            let backend = replica.db.get_database_backend();
            replica
                .db
                .execute_raw(Statement::from_sql_and_values(
                    backend,
                    "DELETE FROM organization_mapping WHERE id = $1",
                    [identifier.into()],
                ))
                .await?;
            Ok(())
        }
    }
}

pub mod project {
    use super::*;
    use sea_orm::entity::prelude::*;

    /// A region model whose shard (`organization_id`) is inferred from the registry.
    #[derive(
        Clone,
        Debug,
        PartialEq,
        DeriveEntityModel,
        outbox_seaorm::replication::ReplicatedRegionModel,
    )]
    #[sea_orm(table_name = "project")]
    #[outbox(category = OutboxCategory::ProjectUpdate, context = Replica)]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        pub organization_id: i64,
        pub name: String,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    // Its own behavior, calling the library.
    #[async_trait::async_trait]
    impl ActiveModelBehavior for ActiveModel {
        async fn after_save<C: ConnectionTrait>(
            model: Model,
            db: &C,
            _insert: bool,
        ) -> Result<Model, DbErr> {
            ActiveModel::outbox_after_save(&model, db).await?;
            Ok(model)
        }

        async fn before_delete<C: ConnectionTrait>(self, db: &C) -> Result<Self, DbErr> {
            self.outbox_before_delete(db).await?;
            Ok(self)
        }
    }

    #[async_trait::async_trait]
    impl RegionReplication for Model {
        async fn handle_async_replication(
            &self,
            replica: &Replica,
            shard: i64,
        ) -> Result<(), HandlerError> {
            replica
                .replications
                .lock()
                .unwrap()
                .push((format!("project@{shard}"), self.id));
            Ok(())
        }

        async fn handle_async_deletion(
            replica: &Replica,
            id: i64,
            shard: i64,
            payload: Option<serde_json::Value>,
        ) -> Result<(), HandlerError> {
            replica
                .tombstones
                .lock()
                .unwrap()
                .push((id, shard, payload));
            Ok(())
        }
    }
}

pub mod user {
    use super::*;
    use sea_orm::entity::prelude::*;

    /// A control model replicated to the regions listed on the row.
    #[derive(
        Clone,
        Debug,
        PartialEq,
        DeriveEntityModel,
        outbox_seaorm::replication::ReplicatedControlModel,
    )]
    #[sea_orm(table_name = "app_user")]
    #[outbox(category = OutboxCategory::UserUpdate, context = Replica, active_model_behavior)]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        pub name: String,
        pub regions: String,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    #[async_trait::async_trait]
    impl ControlReplication for Model {
        async fn outbox_region_names<C: ConnectionTrait>(
            &self,
            _db: &C,
        ) -> Result<Vec<String>, DbErr> {
            Ok(self
                .regions
                .split(',')
                .filter(|r| !r.is_empty())
                .map(str::to_owned)
                .collect())
        }

        async fn handle_async_replication(
            &self,
            replica: &Replica,
            region: &str,
            _shard: i64,
        ) -> Result<(), HandlerError> {
            replica
                .replications
                .lock()
                .unwrap()
                .push((format!("user@{region}:{}", self.name), self.id));
            Ok(())
        }

        async fn handle_async_deletion(
            replica: &Replica,
            region: &str,
            id: i64,
            shard: i64,
            _payload: Option<serde_json::Value>,
        ) -> Result<(), HandlerError> {
            replica
                .tombstones
                .lock()
                .unwrap()
                .push((id, shard, Some(json!({ "region": region }))));
            Ok(())
        }
    }
}

struct Silo {
    db: TestDatabase,
    replica: Arc<Replica>,
    drainer: Drainer<OutboxCategory>,
}

async fn silo(backend: DbBackend, label: &str) -> Silo {
    let db = TestDatabase::of(backend, label).await.unwrap();
    let id = match backend {
        DbBackend::Postgres => "bigserial PRIMARY KEY",
        _ => "INTEGER PRIMARY KEY AUTOINCREMENT",
    };
    for ddl in [
        format!("CREATE TABLE organization (id {id}, slug text NOT NULL UNIQUE, name text NOT NULL)"),
        format!("CREATE TABLE project (id {id}, organization_id bigint NOT NULL, name text NOT NULL)"),
        format!("CREATE TABLE app_user (id {id}, name text NOT NULL, regions text NOT NULL)"),
        "CREATE TABLE organization_mapping (id bigint PRIMARY KEY, shard bigint NOT NULL, slug text NOT NULL, name text NOT NULL)".to_owned(),
    ] {
        db.db.execute_unprepared(&ddl).await.unwrap();
    }
    let replica = Arc::new(Replica {
        db: db.db.clone(),
        tombstones: Mutex::default(),
        replications: Mutex::default(),
    });
    let receivers = Receivers::new()
        .replicate::<organization::Model>(db.db.clone(), replica.clone())
        .replicate::<project::Model>(db.db.clone(), replica.clone())
        .replicate::<user::Model>(db.db.clone(), replica.clone());
    receivers.ensure_complete().unwrap();
    let drainer = Drainer::new(SeaOrmStore::new(db.db.clone()).unwrap(), receivers);
    Silo {
        db,
        replica,
        drainer,
    }
}

async fn mapping(silo: &Silo, id: i64) -> Option<(i64, String, String)> {
    let backend = silo.db.db.get_database_backend();
    let row = silo
        .db
        .db
        .query_one_raw(Statement::from_sql_and_values(
            backend,
            "SELECT shard, slug, name FROM organization_mapping WHERE id = $1",
            [id.into()],
        ))
        .await
        .unwrap()?;
    Some((
        row.try_get("", "shard").unwrap(),
        row.try_get("", "slug").unwrap(),
        row.try_get("", "name").unwrap(),
    ))
}

async fn drain(silo: &Silo) {
    drain_until_idle(&silo.drainer, &OutboxKind::ALL)
        .await
        .unwrap();
}

async fn save_then_flush_replicates_the_row(backend: DbBackend) {
    let silo = silo(backend, "repl_save").await;
    let context = OutboxContext::new();
    let org = context
        .scope(async {
            let txn = silo.db.db.begin().await.unwrap();
            let org = organization::ActiveModel {
                slug: Set("acme".into()),
                name: Set("Acme".into()),
                ..Default::default()
            }
            .insert(&txn)
            .await
            .unwrap();
            txn.commit().await.unwrap();
            org
        })
        .await;
    let flushed = context.flush(&silo.drainer).await;
    assert!(flushed.errors.is_empty(), "{:?}", flushed.errors);
    assert_eq!(
        mapping(&silo, org.id).await,
        Some((org.id, "acme".into(), "Acme".into())),
        "an organization is its own shard"
    );
}

async fn two_updates_deliver_once_with_the_latest_state(backend: DbBackend) {
    let silo = silo(backend, "repl_update").await;
    let org = organization::ActiveModel {
        slug: Set("a".into()),
        name: Set("A".into()),
        ..Default::default()
    }
    .insert(&silo.db.db)
    .await
    .unwrap();
    for name in ["B", "C"] {
        let txn = silo.db.db.begin().await.unwrap();
        let mut active: organization::ActiveModel = org.clone().into();
        active.name = Set(name.into());
        active.update(&txn).await.unwrap();
        txn.commit().await.unwrap();
    }
    assert_eq!(
        silo.drainer
            .view()
            .pending_count(OutboxKind::Region)
            .await
            .unwrap(),
        3
    );
    drain(&silo).await;
    assert_eq!(
        *silo.replica.replications.lock().unwrap(),
        vec![("organization".to_owned(), org.id)]
    );
    assert_eq!(mapping(&silo, org.id).await.unwrap().2, "C");

    // Draining again changes nothing; replaying a change is idempotent.
    drain(&silo).await;
    assert_eq!(silo.replica.replications.lock().unwrap().len(), 1);
    organization::ActiveModel::outbox_after_save(
        &organization::Entity::find_by_id(org.id)
            .one(&silo.db.db)
            .await
            .unwrap()
            .unwrap(),
        &silo.db.db,
    )
    .await
    .unwrap();
    drain(&silo).await;
    assert_eq!(silo.replica.replications.lock().unwrap().len(), 2);
    assert_eq!(mapping(&silo, org.id).await.unwrap().2, "C");
}

async fn delete_delivers_a_tombstone_with_the_saved_payload(backend: DbBackend) {
    let silo = silo(backend, "repl_delete").await;
    let org = organization::ActiveModel {
        slug: Set("gone".into()),
        name: Set("Gone".into()),
        ..Default::default()
    }
    .insert(&silo.db.db)
    .await
    .unwrap();
    drain(&silo).await;
    assert!(mapping(&silo, org.id).await.is_some());
    let txn = silo.db.db.begin().await.unwrap();
    organization::ActiveModel {
        id: Set(org.id),
        ..Default::default()
    }
    .delete(&txn)
    .await
    .unwrap();
    txn.commit().await.unwrap();
    drain(&silo).await;
    assert_eq!(
        *silo.replica.tombstones.lock().unwrap(),
        vec![(org.id, org.id, Some(json!({ "slug": "gone" })))]
    );
    assert_eq!(mapping(&silo, org.id).await, None);
}

async fn a_rolled_back_save_writes_no_outbox(backend: DbBackend) {
    let silo = silo(backend, "repl_rollback").await;
    let txn = silo.db.db.begin().await.unwrap();
    project::ActiveModel {
        organization_id: Set(5),
        name: Set("p".into()),
        ..Default::default()
    }
    .insert(&txn)
    .await
    .unwrap();
    txn.rollback().await.unwrap();
    assert_eq!(
        silo.drainer
            .view()
            .pending_count(OutboxKind::Region)
            .await
            .unwrap(),
        0
    );
}

async fn the_shard_is_inferred_from_the_registry(backend: DbBackend) {
    use outbox_seaorm::replication::ReplicatedModel;
    let silo = silo(backend, "repl_infer").await;
    assert_eq!(
        <project::Model as ReplicatedModel>::SHARD_FIELD,
        "organization_id"
    );
    assert_eq!(<organization::Model as ReplicatedModel>::SHARD_FIELD, "id");
    assert_eq!(<user::Model as ReplicatedModel>::SHARD_FIELD, "id");
    let project = project::ActiveModel {
        organization_id: Set(42),
        name: Set("p".into()),
        ..Default::default()
    }
    .insert(&silo.db.db)
    .await
    .unwrap();
    let depths = silo
        .drainer
        .view()
        .shard_depths(OutboxKind::Region, 10)
        .await
        .unwrap();
    assert_eq!(depths[0].shard.identifier(), 42);
    drain(&silo).await;
    assert_eq!(
        *silo.replica.replications.lock().unwrap(),
        vec![("project@42".to_owned(), project.id)]
    );
}

async fn a_control_model_fans_out_to_each_region(backend: DbBackend) {
    let silo = silo(backend, "repl_control").await;
    let user = user::ActiveModel {
        name: Set("ann".into()),
        regions: Set("us,de".into()),
        ..Default::default()
    }
    .insert(&silo.db.db)
    .await
    .unwrap();
    assert_eq!(
        silo.drainer
            .view()
            .pending_count(OutboxKind::Control)
            .await
            .unwrap(),
        2
    );
    drain(&silo).await;
    let mut seen = silo.replica.replications.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("user@de:ann".to_owned(), user.id),
            ("user@us:ann".to_owned(), user.id)
        ]
    );
    user::ActiveModel {
        id: Set(user.id),
        ..Default::default()
    }
    .delete(&silo.db.db)
    .await
    .unwrap();
    drain(&silo).await;
    let mut tombstones = silo.replica.tombstones.lock().unwrap().clone();
    tombstones.sort_by_key(|t| t.2.as_ref().map(|p| p.to_string()));
    assert_eq!(tombstones.len(), 2, "a tombstone per region");
}

/// `replicate_to_regions`: a row that exists replicates to the regions
/// given (and only those), in the caller's transaction; a missing row
/// writes nothing.
async fn a_control_model_replicates_to_added_regions(backend: DbBackend) {
    let silo = silo(backend, "repl_added").await;
    let user = user::ActiveModel {
        name: Set("ann".into()),
        regions: Set(String::new()),
        ..Default::default()
    }
    .insert(&silo.db.db)
    .await
    .unwrap();
    let pending = || async {
        silo.drainer
            .view()
            .pending_count(OutboxKind::Control)
            .await
            .unwrap()
    };
    assert_eq!(pending().await, 0, "no region yet");
    let missing = replicate_to_regions::<user::Model, _>(&silo.db.db, user.id + 1, ["eu"])
        .await
        .unwrap();
    assert_eq!(missing, None);
    assert_eq!(pending().await, 0, "nothing for a missing row");

    let txn = silo.db.db.begin().await.unwrap();
    let found = replicate_to_regions::<user::Model, _>(&txn, user.id, ["eu", "ap"])
        .await
        .unwrap();
    assert_eq!(found.as_ref(), Some(&user));
    txn.rollback().await.unwrap();
    assert_eq!(pending().await, 0, "rolled back with its transaction");

    replicate_to_regions::<user::Model, _>(&silo.db.db, user.id, ["eu", "ap"])
        .await
        .unwrap();
    assert_eq!(pending().await, 2);
    drain(&silo).await;
    let mut seen = silo.replica.replications.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("user@ap:ann".to_owned(), user.id),
            ("user@eu:ann".to_owned(), user.id)
        ]
    );
}

async fn bulk_helpers_write_one_outbox_per_row_and_roll_back_with_it(backend: DbBackend) {
    let silo = silo(backend, "repl_bulk").await;
    let rows = |prefix: &str| {
        (0..3)
            .map(|i| organization::ActiveModel {
                slug: Set(format!("{prefix}{i}")),
                name: Set("x".into()),
                ..Default::default()
            })
            .collect::<Vec<_>>()
    };
    let txn = silo.db.db.begin().await.unwrap();
    bulk_insert::<organization::Model, _, _>(&txn, rows("rolled"))
        .await
        .unwrap();
    txn.rollback().await.unwrap();
    assert_eq!(
        organization::Entity::find()
            .all(&silo.db.db)
            .await
            .unwrap()
            .len(),
        0
    );
    assert_eq!(
        silo.drainer
            .view()
            .pending_count(OutboxKind::Region)
            .await
            .unwrap(),
        0
    );

    let txn = silo.db.db.begin().await.unwrap();
    let inserted = bulk_insert::<organization::Model, _, _>(&txn, rows("b"))
        .await
        .unwrap();
    txn.commit().await.unwrap();
    assert_eq!(inserted.len(), 3);
    assert_eq!(
        silo.drainer
            .view()
            .pending_count(OutboxKind::Region)
            .await
            .unwrap(),
        3
    );

    let updated = bulk_update::<organization::Model, _>(
        &silo.db.db,
        organization::Entity::update_many()
            .col_expr(
                organization::Column::Name,
                sea_orm::sea_query::Expr::value("renamed"),
            )
            .filter(organization::Column::Slug.starts_with("b")),
    )
    .await
    .unwrap();
    assert_eq!(updated.len(), 3);
    assert_eq!(
        silo.drainer
            .view()
            .pending_count(OutboxKind::Region)
            .await
            .unwrap(),
        6
    );
    drain(&silo).await;
    for org in &inserted {
        assert_eq!(mapping(&silo, org.id).await.unwrap().2, "renamed");
    }
    let deleted = bulk_delete::<organization::Model, _>(
        &silo.db.db,
        organization::Entity::delete_many().filter(organization::Column::Slug.starts_with("b")),
    )
    .await
    .unwrap();
    assert_eq!(deleted.len(), 3);
    drain(&silo).await;
    assert_eq!(silo.replica.tombstones.lock().unwrap().len(), 3);
    assert_eq!(mapping(&silo, inserted[0].id).await, None);
}

outbox_testing::on_both_backends!(
    save_then_flush_replicates_the_row,
    two_updates_deliver_once_with_the_latest_state,
    delete_delivers_a_tombstone_with_the_saved_payload,
    a_rolled_back_save_writes_no_outbox,
    the_shard_is_inferred_from_the_registry,
    a_control_model_fans_out_to_each_region,
    a_control_model_replicates_to_added_regions,
    bulk_helpers_write_one_outbox_per_row_and_roll_back_with_it,
);
