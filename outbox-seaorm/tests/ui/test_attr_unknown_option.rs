use outbox_seaorm::testing::TestDatabase;

#[outbox_seaorm::test(sqlite, migrations = crate::Migrator)]
async fn writes(db: TestDatabase) {
    drop(db);
}

fn main() {}
