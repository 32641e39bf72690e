//! Old paths kept until 0.2: the test support that moved to
//! `outbox-testing` (`#[outbox_seaorm::test]`,
//! `outbox_seaorm::on_both_backends!`) and `write_transaction()` (renamed
//! `write_transaction_options()`). Each still works, and warns with its new
//! path (`tests/ui/deprecated_paths.rs`).

#![allow(deprecated, clippy::unwrap_used, missing_docs)]

use outbox_testing::database::{DbBackend, TestDatabase};

#[outbox_seaorm::test(sqlite, no_migrations)]
async fn the_old_test_attribute_still_gives_a_database(db: TestDatabase) {
    assert!(db.url.starts_with("sqlite:"), "{}", db.url);
}

async fn the_old_macro_still_runs_each_backend(backend: DbBackend) {
    assert!(matches!(backend, DbBackend::Postgres | DbBackend::Sqlite));
}
outbox_seaorm::on_both_backends!(the_old_macro_still_runs_each_backend);

#[test]
fn renamed_items_are_the_new_ones() {
    assert_eq!(
        format!("{:?}", outbox_seaorm::write_transaction()),
        format!("{:?}", outbox_seaorm::write_transaction_options())
    );
}

#[test]
fn old_paths_warn_with_the_new_ones() {
    trybuild::TestCases::new().compile_fail("tests/ui/deprecated_paths.rs");
}
