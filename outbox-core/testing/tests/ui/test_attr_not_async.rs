use outbox_testing::database::TestDatabase;

#[outbox_testing::test]
fn writes(db: TestDatabase) {
    drop(db);
}

fn main() {}
