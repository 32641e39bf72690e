//! `check_schema` names the first outbox migration that has not run, on both
//! backends, whichever migrator ran the others.

#![allow(clippy::unwrap_used, missing_docs)]

use outbox_seaorm::schema::{check_schema, SchemaError, MIGRATIONS};
use outbox_testing::database::{DbBackend, TestDatabase};
use sea_orm_migration::prelude::*;

/// A user's own migrator with the outbox migrations inside (tracked in
/// `seaql_migrations`, not `outbox_seaql_migrations`).
struct UserMigrator;

#[async_trait::async_trait]
impl MigratorTrait for UserMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        outbox_migrations::migrations()
    }
}

fn names() -> Vec<String> {
    outbox_migrations::migrations()
        .iter()
        .map(|migration| migration.name().to_owned())
        .collect()
}

#[test]
fn the_check_knows_every_outbox_migration_in_order() {
    let listed: Vec<String> = MIGRATIONS.iter().map(|m| m.migration.to_owned()).collect();
    assert_eq!(listed, names(), "schema::MIGRATIONS is out of date");
}

async fn each_missing_migration_is_named_with_the_fix(backend: DbBackend) {
    let t = TestDatabase::of(backend, "schema_steps").await.unwrap();
    check_schema(&t.db).await.unwrap();
    outbox_migrations::OutboxMigrator::down(&t.db, None)
        .await
        .unwrap();
    let names = names();
    // A migration of storage settings only has nothing to check: the check
    // names the next one it can see missing, and passes when none is left.
    let checkable = |name: &String| {
        MIGRATIONS.iter().any(|m| {
            m.migration == name.as_str() && !(m.tables.is_empty() && m.dropped_indexes.is_empty())
        })
    };
    for applied in 0..names.len() {
        let Some(at) = (applied..names.len()).find(|&at| checkable(&names[at])) else {
            check_schema(&t.db).await.unwrap();
            outbox_migrations::OutboxMigrator::up(&t.db, Some(1))
                .await
                .unwrap();
            continue;
        };
        let expected = &names[at];
        let error = check_schema(&t.db).await.unwrap_err();
        let message = error.to_string();
        // What `unwrap()` and `?` out of `main` print says the fix too.
        let debug = format!("{error:?}");
        assert!(
            debug.starts_with("SchemaError::NotMigrated: ") && debug.ends_with(&message),
            "{debug}"
        );
        match error {
            SchemaError::NotMigrated {
                migration,
                table,
                column,
                index,
                later,
            } => {
                assert_eq!(migration, expected, "after {applied} migrations");
                assert_eq!(
                    later,
                    names[at + 1..].iter().filter(|n| checkable(n)).count()
                );
                let what = match (column, index) {
                    (Some(column), _) => format!("table `{table}` has no column `{column}`"),
                    (None, Some(index)) => format!("table `{table}` still has index `{index}`"),
                    (None, None) => format!("table `{table}` does not exist"),
                };
                assert!(message.contains(&what), "{message}");
            }
            other => panic!("after {applied} migrations: {other}"),
        }
        assert!(message.contains(expected.as_str()), "{message}");
        assert!(
            message.contains("outbox_migrations::migrations()")
                && message.contains("OutboxMigrator::up"),
            "the fix is named: {message}"
        );
        outbox_migrations::OutboxMigrator::up(&t.db, Some(1))
            .await
            .unwrap();
    }
    check_schema(&t.db).await.unwrap();
}

async fn a_users_own_migrator_passes_the_check(backend: DbBackend) {
    let t = TestDatabase::of(backend, "schema_user").await.unwrap();
    outbox_migrations::OutboxMigrator::down(&t.db, None)
        .await
        .unwrap();
    let error = check_schema(&t.db).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("table `region_outbox` does not exist"),
        "{error}"
    );
    UserMigrator::up(&t.db, None).await.unwrap();
    check_schema(&t.db).await.unwrap();
    // A table of the right name without a column the library needs.
    t.db.execute_unprepared("ALTER TABLE outbox_control DROP COLUMN reason")
        .await
        .unwrap();
    let error = check_schema(&t.db).await.unwrap_err();
    assert!(
        matches!(
            error,
            SchemaError::NotMigrated {
                migration: "m20261123_000005_runtime_controls",
                table: "outbox_control",
                column: Some("reason"),
                index: None,
                later: 0,
            }
        ),
        "{error}"
    );
}

outbox_testing::on_both_backends!(
    each_missing_migration_is_named_with_the_fix,
    a_users_own_migrator_passes_the_check,
);
