//! The store's statements by the file they come from, for tools outside the
//! crate that name the SQL a pool sends (a statement counter's labels).

use outbox_core::OutboxKind;

use super::{
    table, TableSql, CREATE_BUCKETS, DEAD_LETTERS, DELETE_STATES, EXPIRE_CLAIMS, FAILING_SHARDS,
    FENCE, LOCK_FREE_BUCKETS, PARKED_SHARDS, RENEW, RETRY_STATES, TABLE_HEALTH, UPSERT_STATES,
};

/// Every statement [`PgStore`](super::PgStore) reads from a file of its
/// `sql/` folder, by name, with its text as the store sends it:
///
/// - a statement of a file of its own: the file's path relative to that
///   folder (`renew.sql`), and the file's text (surrounding whitespace
///   included);
/// - a statement on an outbox table, written once in `sql/outbox/` and
///   rendered for each table: the table's kind and the file's name
///   (`region/claim_shard.sql`, `control/claim_shard.sql`), and the text
///   rendered for that table.
///
/// For tools that name the statements a pool sends, as
/// `outbox_testing::database::wire::label` does. Statements the store
/// builds in code are not listed.
///
/// ```
/// let files = outbox_seaorm::store::postgres::sql_files();
/// assert!(files.iter().any(|(name, sql)| name == "region/claim_shard.sql" && sql.contains("region_outbox")));
/// ```
pub fn sql_files() -> Vec<(String, &'static str)> {
    let mut files: Vec<(String, &'static str)> = [
        ("renew.sql", RENEW),
        ("expire_claims.sql", EXPIRE_CLAIMS),
        ("fence.sql", FENCE),
        ("upsert_states.sql", UPSERT_STATES),
        ("delete_states.sql", DELETE_STATES),
        ("failing_shards.sql", FAILING_SHARDS),
        ("parked_shards.sql", PARKED_SHARDS),
        ("dead_letters.sql", DEAD_LETTERS),
        ("create_buckets.sql", CREATE_BUCKETS),
        ("lock_free_buckets.sql", LOCK_FREE_BUCKETS),
        ("retry_states.sql", RETRY_STATES),
        ("table_health.sql", TABLE_HEALTH),
    ]
    .into_iter()
    .map(|(name, sql)| (name.to_owned(), sql))
    .collect();
    for kind in OutboxKind::ALL {
        files.extend(
            table(kind)
                .files()
                .into_iter()
                .map(|(name, sql)| (format!("{}/{name}", kind.as_str()), sql)),
        );
    }
    files
}

impl TableSql {
    /// The statements of one table rendered from files, by file name.
    fn files(&'static self) -> [(&'static str, &'static str); 18] {
        [
            ("claim_due_oldest.sql", &self.claim_due_oldest),
            ("claim_due_newest.sql", &self.claim_due_newest),
            ("claim_due_above.sql", &self.claim_due_above),
            ("claim_shard.sql", &self.claim_shard),
            ("claim_before_commit.sql", &self.claim_before_commit),
            ("claim_one_before_commit.sql", &self.claim_one_before_commit),
            ("commit_finished.sql", &self.commit_finished),
            ("complete.sql", &self.complete),
            ("delete_rows.sql", &self.delete_rows),
            ("dead_letter.sql", &self.dead_letter),
            ("reschedule.sql", &self.reschedule),
            ("reset_schedule.sql", &self.reset_schedule),
            ("replay_dead_letters.sql", &self.replay_dead_letters),
            ("shard_depths.sql", &self.shard_depths),
            ("deepest_shards.sql", &self.deepest_shards),
            ("count_pending.sql", &self.count_pending),
            ("backlog.sql", &self.backlog),
            ("has_due.sql", &self.has_due),
        ]
        .map(|(name, sql)| (name, sql.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use outbox_core::OutboxKind;

    use super::super::render::render;
    use super::sql_files;

    /// The `.sql` files under `dir`, by path relative to `root`, but for
    /// the sources of `outbox/`: each rendered for both tables, named by
    /// table (`region/claim_shard.sql`).
    fn read(root: &Path, dir: &Path, files: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            let sql = path.extension().is_some_and(|e| e == "sql");
            if path == root.join("outbox") {
                read_sources(&path, files);
            } else if path.is_dir() {
                read(root, &path, files);
            } else if sql {
                let name = path.strip_prefix(root).unwrap().to_string_lossy();
                let text = std::fs::read_to_string(&path).unwrap();
                files.insert(name.replace('\\', "/"), text);
            }
        }
    }

    /// The sources of `outbox/` (its fragments, in `include/`, aside),
    /// rendered for both tables.
    fn read_sources(dir: &Path, files: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "sql") {
                let name = path.file_name().unwrap().to_string_lossy();
                let source = std::fs::read_to_string(&path).unwrap();
                for kind in OutboxKind::ALL {
                    files.insert(format!("{}/{name}", kind.as_str()), render(&source, kind));
                }
            }
        }
    }

    #[test]
    fn every_file_of_the_sql_folder_is_listed_with_its_text() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/postgres/sql");
        let mut on_disk = BTreeMap::new();
        read(&root, &root, &mut on_disk);
        let listed: BTreeMap<String, String> = sql_files()
            .into_iter()
            .map(|(name, sql)| (name, sql.to_owned()))
            .collect();
        assert_eq!(listed.len(), sql_files().len(), "a file is listed twice");
        assert_eq!(listed, on_disk);
    }
}
