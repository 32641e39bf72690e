use outbox_testing::database::TestDatabase;

#[outbox_testing::test]
async fn two_databases(first: TestDatabase, second: TestDatabase) {
    drop((first, second));
}

#[outbox_testing::test]
async fn not_a_database(db: String) {
    drop(db);
}

fn main() {}
