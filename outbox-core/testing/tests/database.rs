//! Test databases made with the application's own migrator, or none, on
//! PostgreSQL and SQLite, through `#[outbox_testing::test]` and
//! `TestDatabase::options()`.

#![allow(clippy::unwrap_used, missing_docs)]

use outbox_seaorm::entity::region_outbox;
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId};
use outbox_testing::database::{admin_url, connect, DbBackend, TestDatabase};
use sea_orm::{ConnectionTrait, DbErr, EntityTrait, PaginatorTrait, Statement};
use sea_orm_migration::prelude::*;

outbox_core::registry! {
    ProductScope = 0 {
        ProductUpdate = 1,
    }
}

/// An application's migrator, as the README shows it: the outbox migrations
/// embedded among its own.
struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        let mut migrations = outbox_migrations::migrations();
        migrations.push(Box::new(CreateProduct));
        migrations
    }
}

/// The application's own table.
struct CreateProduct;

impl MigrationName for CreateProduct {
    fn name(&self) -> &str {
        "m20270101_000001_create_product"
    }
}

#[derive(DeriveIden)]
enum Product {
    Table,
    Id,
    Name,
}

#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for CreateProduct {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Product::Table)
                    .col(
                        ColumnDef::new(Product::Id)
                            .big_integer()
                            .not_null()
                            .primary_key(),
                    )
                    .col(ColumnDef::new(Product::Name).string().not_null())
                    .to_owned(),
            )
            .await
    }
}

/// A migrator whose second migration fails.
struct BrokenMigrator;

struct Broken;

impl MigrationName for Broken {
    fn name(&self) -> &str {
        "m20270101_000002_broken"
    }
}

#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for Broken {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .get_connection()
            .execute_unprepared("CREATE TABLE product (")
            .await
            .map(|_| ())
    }
}

#[async_trait::async_trait]
impl MigratorTrait for BrokenMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![Box::new(CreateProduct), Box::new(Broken)]
    }
}

async fn count(db: &impl ConnectionTrait, sql: &str) -> i64 {
    let row = db
        .query_one_raw(Statement::from_string(db.get_database_backend(), sql))
        .await
        .unwrap()
        .unwrap();
    row.try_get_by_index(0).unwrap()
}

/// The tables of the test database (outside PostgreSQL's catalogs).
async fn table_count(db: &impl ConnectionTrait) -> i64 {
    let sql = match db.get_database_backend() {
        DbBackend::Postgres => {
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        }
        _ => "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
    };
    count(db, sql).await
}

#[outbox_testing::test(migrator = Migrator)]
async fn users_migrator_with_the_outbox_migrations_embedded(db: TestDatabase) {
    let txn = outbox_seaorm::begin_write(&db.db).await.unwrap();
    txn.execute_unprepared("INSERT INTO product (id, name) VALUES (7, 'lamp')")
        .await
        .unwrap();
    let message = OutboxMessage::new(OutboxCategory::ProductUpdate, ShardId(7), ObjectId(7));
    write_region(&txn, message).await.unwrap();
    txn.commit().await.unwrap();

    assert_eq!(count(&db.db, "SELECT count(*) FROM product").await, 1);
    let rows = region_outbox::Entity::find().all(&db.db).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].object_identifier, 7);
    // One migrator, one table of applied migrations: the application's.
    assert_eq!(
        count(&db.db, "SELECT count(*) FROM seaql_migrations").await,
        outbox_migrations::migrations().len() as i64 + 1
    );
}

#[outbox_testing::test(no_migrations)]
async fn no_migrations_gives_an_empty_database(db: TestDatabase) {
    assert_eq!(table_count(&db.db).await, 0);
    let missing = region_outbox::Entity::find().count(&db.db).await;
    assert!(missing.is_err(), "no region_outbox table: {missing:?}");
}

#[outbox_testing::test]
async fn without_options_the_outbox_migrations_apply(db: TestDatabase) -> Result<(), DbErr> {
    let txn = outbox_seaorm::begin_write(&db.db).await?;
    let message = OutboxMessage::new(OutboxCategory::ProductUpdate, ShardId(1), ObjectId(2));
    write_region(&txn, message).await.unwrap();
    txn.commit().await?;
    assert_eq!(region_outbox::Entity::find().count(&db.db).await?, 1);
    Ok(())
}

#[outbox_testing::test(sqlite, migrator = self::Migrator)]
async fn one_backend_when_asked(db: TestDatabase) {
    assert_eq!(db.db.get_database_backend(), DbBackend::Sqlite);
    // SQLite test databases are opened with `outbox_seaorm::sqlite`'s pragmas.
    let row = db
        .db
        .query_one_raw(Statement::from_string(
            DbBackend::Sqlite,
            "PRAGMA journal_mode",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.try_get_by_index::<String>(0).unwrap(), "wal");
}

#[outbox_testing::test(postgres, no_migrations)]
async fn postgres_only(db: TestDatabase) {
    assert_eq!(db.db.get_database_backend(), DbBackend::Postgres);
}

/// The test databases named `t_<label>_…` that exist now.
async fn databases_labelled(backend: DbBackend, label: &str) -> Vec<String> {
    let prefix = format!("t_{label}_");
    match backend {
        DbBackend::Postgres => {
            let admin = connect(&admin_url().unwrap(), 1).await.unwrap();
            let rows = admin
                .query_all_raw(Statement::from_sql_and_values(
                    DbBackend::Postgres,
                    "SELECT datname FROM pg_database WHERE starts_with(datname, $1)",
                    [prefix.into()],
                ))
                .await
                .unwrap();
            admin.close().await.unwrap();
            rows.iter()
                .map(|row| row.try_get_by_index(0).unwrap())
                .collect()
        }
        _ => {
            let dir = std::env::temp_dir().join("outbox-tests-sqlite");
            let Ok(entries) = std::fs::read_dir(dir) else {
                return Vec::new();
            };
            entries
                .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
                .filter(|name| name.starts_with(&prefix))
                .collect()
        }
    }
}

async fn a_failed_migration_leaves_no_database(backend: DbBackend) {
    let label = "failed_migration_cleanup";
    let error = TestDatabase::options()
        .migrator::<BrokenMigrator>()
        .of(backend, label)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("BrokenMigrator"), "{error}");
    assert_eq!(
        databases_labelled(backend, label).await,
        Vec::<String>::new()
    );
}

outbox_testing::on_both_backends!(a_failed_migration_leaves_no_database);
