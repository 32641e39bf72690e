use outbox_testing::database::TestDatabase;

mod migration {
    pub struct Migrator;

    #[async_trait::async_trait]
    impl sea_orm_migration::MigratorTrait for Migrator {
        fn migrations() -> Vec<Box<dyn sea_orm_migration::MigrationTrait>> {
            outbox_migrations::migrations()
        }
    }
}

#[outbox_testing::test]
async fn default(_db: TestDatabase) {}

#[outbox_testing::test(migrator = migration::Migrator, sqlite)]
async fn relative_path(_db: TestDatabase) {}

#[outbox_testing::test(postgres, no_migrations)]
#[ignore = "compiled only"]
async fn returns_a_result(db: TestDatabase) -> Result<(), sea_orm::DbErr> {
    db.db.ping().await
}

fn main() {}
