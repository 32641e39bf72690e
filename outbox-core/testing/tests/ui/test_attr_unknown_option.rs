use outbox_testing::database::TestDatabase;

#[outbox_testing::test(sqlite, migrations = crate::Migrator)]
async fn writes(db: TestDatabase) {
    drop(db);
}

fn main() {}
