//! Is the database migrated? [`check_schema`] answers before anything runs.
//!
//! A worker started on a database without the outbox tables would log
//! `no such table` on every poll and never deliver; `OutboxWorker`'s `spawn`
//! (outbox-axum) calls [`check_schema`] first and refuses to start instead,
//! with an error that names the missing table, the migration that creates it
//! and the fix. Call it yourself at startup when you drain or flush without
//! the worker (an `OutboxLayer` of its own, a `Drainer` in a job).
//!
//! The check reads the catalogue (one query: `information_schema.columns` on
//! PostgreSQL, `pragma_table_info` on SQLite) and compares it with the tables
//! and columns every outbox migration creates, so it holds whichever
//! migrator ran them: `outbox_migrations::OutboxMigrator` (tracked in
//! `outbox_seaql_migrations`) or your own, with `outbox_migrations::migrations()`
//! inside (tracked in `seaql_migrations`).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use outbox_seaorm::schema::{check_schema, SchemaError};
//! use sea_orm_migration::MigratorTrait;
//!
//! let db = sea_orm::Database::connect("sqlite::memory:").await?;
//! let error = check_schema(&db).await.unwrap_err();
//! assert!(matches!(error, SchemaError::NotMigrated { table: "region_outbox", .. }));
//! println!("{error}"); // names the table, the migration and how to run it
//!
//! outbox_migrations::OutboxMigrator::up(&db, None).await?;
//! check_schema(&db).await?;
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, BTreeSet};

use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};

use crate::UnsupportedBackend;

/// What one outbox migration leaves in the catalogue: the tables and
/// columns the library reads and writes (a table may be listed more than
/// once), and the indexes it drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrationSchema {
    /// The migration's name, as sea-orm-migration records it.
    pub migration: &'static str,
    /// Tables (new or altered) and the columns of each that it creates.
    pub tables: &'static [(&'static str, &'static [&'static str])],
    /// Indexes it drops, each with its table.
    pub dropped_indexes: &'static [(&'static str, &'static str)],
}

/// The columns the outbox tables and the dead letters share.
const OUTBOX_COLUMNS: &[&str] = &[
    "id",
    "shard_scope",
    "shard_identifier",
    "category",
    "object_identifier",
    "payload",
    "scheduled_from",
    "scheduled_for",
    "date_added",
];

/// The outbox migrations in order, with what each creates. A test checks
/// that it lists every migration of `outbox_migrations::migrations()` and
/// that a database migrated to each step passes exactly up to it.
pub const MIGRATIONS: &[MigrationSchema] = &[
    MigrationSchema {
        migration: "m20261121_000001_create_outbox_tables",
        tables: &[
            ("region_outbox", OUTBOX_COLUMNS),
            ("control_outbox", OUTBOX_COLUMNS),
            ("control_outbox", &["region_name"]),
        ],
        dropped_indexes: &[],
    },
    MigrationSchema {
        migration: "m20261121_000002_create_backfill_tables",
        tables: &[
            (
                "outbox_backfill_cursor",
                &["table_name", "lower_bound_id", "version"],
            ),
            ("outbox_option", &["key", "value"]),
        ],
        dropped_indexes: &[],
    },
    MigrationSchema {
        migration: "m20261121_000003_create_dead_letter_table",
        tables: &[
            ("outbox_dead_letter", OUTBOX_COLUMNS),
            (
                "outbox_dead_letter",
                &["kind", "region_name", "error", "dead_lettered_at"],
            ),
        ],
        dropped_indexes: &[],
    },
    MigrationSchema {
        migration: "m20261123_000004_bucket_claims",
        tables: &[
            (
                "outbox_claim_bucket",
                &["kind", "bucket", "token", "owner", "lease_until", "version"],
            ),
            (
                "outbox_shard_state",
                &[
                    "kind",
                    "region_name",
                    "shard_scope",
                    "shard_identifier",
                    "attempts",
                    "last_backoff_ms",
                    "retry_at",
                    "last_error",
                    "failed_at",
                ],
            ),
        ],
        dropped_indexes: &[],
    },
    MigrationSchema {
        migration: "m20261123_000005_runtime_controls",
        tables: &[(
            "outbox_control",
            &[
                "kind",
                "region_name",
                "shard_scope",
                "whole_scope",
                "shard_identifier",
                "action",
                "reason",
                "created_at",
            ],
        )],
        dropped_indexes: &[],
    },
    MigrationSchema {
        migration: "m20261123_000006_trace_context",
        tables: &[
            ("region_outbox", &["traceparent"]),
            ("control_outbox", &["traceparent"]),
            ("outbox_dead_letter", &["traceparent"]),
        ],
        dropped_indexes: &[],
    },
    MigrationSchema {
        migration: "m20261123_000007_message_ids",
        tables: &[
            ("region_outbox", &["message_id"]),
            ("control_outbox", &["message_id"]),
            ("outbox_dead_letter", &["message_id"]),
        ],
        dropped_indexes: &[],
    },
    MigrationSchema {
        migration: "m20261123_000008_inbox",
        tables: &[("outbox_inbox", &["consumer", "message_id", "received_at"])],
        dropped_indexes: &[],
    },
    MigrationSchema {
        migration: "m20261125_000009_flush_before_commit",
        tables: &[],
        dropped_indexes: &[
            ("region_outbox", "region_outbox_group"),
            ("control_outbox", "control_outbox_group"),
        ],
    },
    MigrationSchema {
        migration: "m20261125_000010_fencing_tokens",
        // With the counter `outbox_fence` (a sequence on PostgreSQL).
        tables: &[(
            "outbox_inbox_fence",
            &["consumer", "sender", "shard", "fence", "applied_at"],
        )],
        dropped_indexes: &[],
    },
    MigrationSchema {
        migration: "m20261125_000011_superseded_counts",
        tables: &[("outbox_inbox_fence", &["superseded", "superseded_at"])],
        dropped_indexes: &[],
    },
    MigrationSchema {
        migration: "m20261126_000012_outbox_autovacuum",
        // Storage parameters only (PostgreSQL): nothing the check can see,
        // and nothing the outbox needs to run.
        tables: &[],
        dropped_indexes: &[],
    },
    MigrationSchema {
        migration: "m20261126_000013_operator_audit",
        tables: &[(
            "outbox_audit",
            &[
                "id", "at", "actor", "role", "action", "target", "reason", "outcome", "detail",
            ],
        )],
        dropped_indexes: &[],
    },
    MigrationSchema {
        migration: "m20261126_000014_outbox_history",
        tables: &[(
            "outbox_history",
            &[
                "at",
                "kind",
                "scope",
                "owner",
                "depth",
                "oldest_age_ms",
                "delivered",
                "failed",
                "dead_lettered",
                "dead_letters",
            ],
        )],
        dropped_indexes: &[],
    },
    MigrationSchema {
        migration: "m20261128_000016_payload_version",
        tables: &[
            ("region_outbox", &["payload_version"]),
            ("control_outbox", &["payload_version"]),
            ("outbox_dead_letter", &["payload_version"]),
        ],
        dropped_indexes: &[],
    },
];

/// How to run the migrations, for the error messages.
const FIX: &str = "run the outbox migrations before starting: add \
    `outbox_migrations::migrations()` to your own sea-orm-migration Migrator and run it, \
    or run `outbox_migrations::OutboxMigrator::up(&db, None)`";

/// The database lacks what the outbox needs.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// An outbox migration has not run: a table or a column it creates is
    /// missing.
    #[error(
        "the outbox tables are not migrated: {} (outbox migration {migration} has not run{}); {FIX}",
        describe(table, *column, *index),
        also_missing(*later)
    )]
    NotMigrated {
        /// The first migration that has not run.
        migration: &'static str,
        /// A table it creates or alters that is missing or lacks `column`,
        /// or still has `index`.
        table: &'static str,
        /// The missing column, when the table exists.
        column: Option<&'static str>,
        /// An index the migration drops that is still there.
        index: Option<&'static str>,
        /// How many later outbox migrations have not run either (of those
        /// the check can see: not the ones that only change settings).
        later: usize,
    },
    /// The catalogue could not be read (the database is unreachable, or the
    /// role may not read it).
    #[error("could not check the outbox tables: {0}")]
    Database(#[from] DbErr),
    /// The database is not PostgreSQL or SQLite.
    #[error(transparent)]
    UnsupportedBackend(#[from] UnsupportedBackend),
}

crate::error_debug::debug_with_message!(SchemaError {
    NotMigrated,
    Database,
    UnsupportedBackend
});

fn describe(table: &str, column: Option<&str>, index: Option<&str>) -> String {
    match (column, index) {
        (Some(column), _) => format!("table `{table}` has no column `{column}`"),
        (None, Some(index)) => format!("table `{table}` still has index `{index}`"),
        (None, None) => format!("table `{table}` does not exist"),
    }
}

fn also_missing(count: usize) -> String {
    match count {
        0 => String::new(),
        1 => ", nor has the one after it".to_owned(),
        n => format!(", nor have the {n} after it"),
    }
}

/// Checks that every outbox migration has run on `db`: each table and
/// column the library uses exists, and no index a migration dropped is left.
///
/// # Errors
///
/// [`SchemaError::NotMigrated`] naming the first migration that has not run
/// and a table or column it creates; [`SchemaError::Database`] when the
/// catalogue cannot be read; [`SchemaError::UnsupportedBackend`] for a
/// database other than PostgreSQL or SQLite.
pub async fn check_schema<C: ConnectionTrait>(db: &C) -> Result<(), SchemaError> {
    let present = catalogue(db).await?;
    let mut missing = MIGRATIONS.iter().filter_map(|step| {
        let column = step.tables.iter().find_map(|(table, columns)| {
            let Some(have) = present.columns.get(*table) else {
                return Some((step.migration, *table, None, None));
            };
            columns
                .iter()
                .find(|column| !have.contains(**column))
                .map(|column| (step.migration, *table, Some(*column), None))
        });
        column.or_else(|| {
            step.dropped_indexes
                .iter()
                .find(|(table, index)| {
                    // Not run: the table is not there yet, or the index still.
                    !present.columns.contains_key(*table)
                        || present
                            .indexes
                            .get(*table)
                            .is_some_and(|indexes| indexes.contains(*index))
                })
                .map(|(table, index)| (step.migration, *table, None, Some(*index)))
        })
    });
    match missing.next() {
        None => Ok(()),
        Some((migration, table, column, index)) => Err(SchemaError::NotMigrated {
            migration,
            table,
            column,
            index,
            later: missing.count(),
        }),
    }
}

/// The columns and indexes of the outbox tables, by table.
#[derive(Default)]
struct Catalogue {
    columns: BTreeMap<String, BTreeSet<String>>,
    indexes: BTreeMap<String, BTreeSet<String>>,
}

/// What the catalogue says of the outbox tables, in one query.
async fn catalogue<C: ConnectionTrait>(db: &C) -> Result<Catalogue, SchemaError> {
    let tables: BTreeSet<&str> = MIGRATIONS
        .iter()
        .flat_map(|step| step.tables.iter().map(|(table, _)| *table))
        .collect();
    let backend = db.get_database_backend();
    let list = tables
        .iter()
        .map(|table| format!("'{table}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = match backend {
        DbBackend::Postgres => format!(
            "SELECT table_name::text AS table_name, column_name::text AS column_name, \
                    false AS is_index \
             FROM information_schema.columns \
             WHERE table_schema = ANY (current_schemas(false)) AND table_name IN ({list}) \
             UNION ALL \
             SELECT tablename::text, indexname::text, true FROM pg_indexes \
             WHERE schemaname = ANY (current_schemas(false)) AND tablename IN ({list})"
        ),
        DbBackend::Sqlite => format!(
            "SELECT m.name AS table_name, p.name AS column_name, false AS is_index \
             FROM sqlite_master AS m JOIN pragma_table_info(m.name) AS p \
             WHERE m.type = 'table' AND m.name IN ({list}) \
             UNION ALL \
             SELECT tbl_name, name, true FROM sqlite_master \
             WHERE type = 'index' AND tbl_name IN ({list})"
        ),
        other => return Err(UnsupportedBackend(other).into()),
    };
    let rows = db
        .query_all_raw(Statement::from_string(backend, sql))
        .await?;
    let mut present = Catalogue::default();
    for row in rows {
        let table: String = row.try_get("", "table_name")?;
        let name: String = row.try_get("", "column_name")?;
        let is_index: bool = row.try_get("", "is_index")?;
        let of = if is_index {
            &mut present.indexes
        } else {
            &mut present.columns
        };
        of.entry(table).or_default().insert(name);
    }
    Ok(present)
}
