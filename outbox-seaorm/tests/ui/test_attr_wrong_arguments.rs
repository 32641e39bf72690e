use outbox_seaorm::testing::TestDatabase;

#[outbox_seaorm::test]
async fn two_databases(first: TestDatabase, second: TestDatabase) {
    drop((first, second));
}

#[outbox_seaorm::test]
async fn not_a_database(db: String) {
    drop(db);
}

fn main() {}
