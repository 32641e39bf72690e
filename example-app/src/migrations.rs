//! The schemas of the silos: the outbox tables plus each silo's own tables.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

fn id_column(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Postgres => "bigserial PRIMARY KEY",
        _ => "INTEGER PRIMARY KEY AUTOINCREMENT",
    }
}

async fn run(manager: &SchemaManager<'_>, statements: Vec<String>) -> Result<(), DbErr> {
    for statement in statements {
        manager
            .get_connection()
            .execute_unprepared(&statement)
            .await?;
    }
    Ok(())
}

/// A region silo's tables.
#[derive(DeriveMigrationName)]
pub struct RegionSchema;

#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for RegionSchema {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let id = id_column(manager.get_database_backend());
        run(
            manager,
            vec![
                format!("CREATE TABLE organization (id {id}, slug text NOT NULL UNIQUE, name text NOT NULL)"),
                format!(
                    "CREATE TABLE organization_member (id {id}, organization_id bigint NOT NULL, \
                     user_id bigint NOT NULL, role text NOT NULL, UNIQUE (organization_id, user_id))"
                ),
                "CREATE TABLE user_replica (id bigint PRIMARY KEY, email text NOT NULL, name text NOT NULL)"
                    .to_owned(),
            ],
        )
        .await
    }
}

/// Globally unique ids for what a region creates (see `crate::ids`): the
/// per-table sequences, started above the ids already in use.
pub struct RegionIdSequences;

impl MigrationName for RegionIdSequences {
    fn name(&self) -> &str {
        "m20261123_000002_region_id_sequences"
    }
}

#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for RegionIdSequences {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let mut statements = vec![
            "CREATE TABLE id_sequence (name text PRIMARY KEY, last bigint NOT NULL)".to_owned(),
        ];
        for table in crate::ids::TABLES {
            statements.push(format!(
                "INSERT INTO id_sequence (name, last) SELECT '{table}', coalesce(max(id), 0) FROM {table}"
            ));
        }
        run(manager, statements).await
    }
}

/// PostgreSQL: the id sequences become database sequences (see
/// `crate::ids`), whose `nextval` takes no lock a transaction holds: a
/// request frozen half-way (a paused process) no longer stops every other
/// create of its region. They start a million above the rows' counters, so
/// that processes of the previous version, which still bump the rows
/// during a rolling deploy, cannot hand out the same ids. SQLite keeps the
/// rows (one writer at a time there anyway).
pub struct RegionIdSequenceObjects;

impl MigrationName for RegionIdSequenceObjects {
    fn name(&self) -> &str {
        "m20261125_000003_region_id_sequence_objects"
    }
}

#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for RegionIdSequenceObjects {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let mut statements = Vec::new();
        for table in crate::ids::TABLES {
            statements.push(format!("CREATE SEQUENCE id_sequence_{table} AS bigint"));
            statements.push(format!(
                "SELECT setval('id_sequence_{table}', coalesce((SELECT last FROM id_sequence \
                 WHERE name = '{table}'), 0) + {}, false)",
                crate::ids::SEQUENCE_HEADROOM
            ));
        }
        run(manager, statements).await
    }
}

/// The control silo's tables.
#[derive(DeriveMigrationName)]
pub struct ControlSchema;

#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for ControlSchema {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let id = id_column(manager.get_database_backend());
        run(
            manager,
            vec![
                format!("CREATE TABLE users (id {id}, email text NOT NULL UNIQUE, name text NOT NULL)"),
                "CREATE TABLE organization_mapping (organization_id bigint PRIMARY KEY, \
                 slug text NOT NULL, name text NOT NULL, region text NOT NULL)"
                    .to_owned(),
                "CREATE INDEX organization_mapping_slug ON organization_mapping (slug)".to_owned(),
                "CREATE TABLE member_mapping (region text NOT NULL, member_id bigint NOT NULL, \
                 organization_id bigint NOT NULL, user_id bigint NOT NULL, role text NOT NULL, \
                 PRIMARY KEY (region, member_id))"
                    .to_owned(),
                format!(
                    "CREATE TABLE audit_log (id {id}, region text NOT NULL, region_sequence bigint NOT NULL, \
                     organization_id bigint NOT NULL, action text NOT NULL, detail text NOT NULL, \
                     occurred_at text NOT NULL, UNIQUE (region, region_sequence))"
                ),
            ],
        )
        .await
    }
}

/// Control's audit log records who did it (`AuditEventV2::actor`); rows
/// from before have none.
pub struct ControlAuditActor;

impl MigrationName for ControlAuditActor {
    fn name(&self) -> &str {
        "m20261129_000001_control_audit_actor"
    }
}

#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for ControlAuditActor {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run(
            manager,
            vec!["ALTER TABLE audit_log ADD COLUMN actor text".to_owned()],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run(
            manager,
            vec!["ALTER TABLE audit_log DROP COLUMN actor".to_owned()],
        )
        .await
    }
}

/// Migrates a region silo's database.
pub struct RegionMigrator;

#[async_trait::async_trait]
impl MigratorTrait for RegionMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        let mut migrations = outbox_migrations::migrations();
        migrations.push(Box::new(RegionSchema));
        migrations.push(Box::new(RegionIdSequences));
        migrations.push(Box::new(RegionIdSequenceObjects));
        migrations
    }
}

/// Migrates the control silo's database.
pub struct ControlMigrator;

#[async_trait::async_trait]
impl MigratorTrait for ControlMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        let mut migrations = outbox_migrations::migrations();
        migrations.push(Box::new(ControlSchema));
        migrations.push(Box::new(ControlAuditActor));
        migrations
    }
}
