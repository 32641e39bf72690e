use outbox_seaorm::testing::TestDatabase;

#[outbox_seaorm::test]
fn writes(db: TestDatabase) {
    drop(db);
}

fn main() {}
