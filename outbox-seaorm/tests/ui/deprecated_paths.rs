#![deny(deprecated)]

use outbox_testing::database::{DbBackend, TestDatabase};

#[outbox_seaorm::test]
async fn writes(_db: TestDatabase) {}

async fn both(_backend: DbBackend) {}
outbox_seaorm::on_both_backends!(both);

fn main() {
    let _ = outbox_seaorm::write_transaction();
}
