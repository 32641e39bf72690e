//! The store's statements by the file they come from, for tools outside the
//! crate that name the SQL a pool sends (a statement counter's labels).

use super::{
    TableSql, CONTROL, CREATE_BUCKETS, DEAD_LETTERS, DELETE_STATES, EXPIRE_CLAIMS, FAILING_SHARDS,
    FENCE, LOCK_FREE_BUCKETS, REGION, RENEW, RETRY_STATES, TABLE_HEALTH, UPSERT_STATES,
};

/// Every statement [`PgStore`](super::PgStore) reads from a file of its
/// `sql/` folder: the file's path relative to that folder
/// (`region/claim_shard.sql`, `renew.sql`) and its text as the store sends
/// it (the file's, surrounding whitespace included).
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
        ("dead_letters.sql", DEAD_LETTERS),
        ("create_buckets.sql", CREATE_BUCKETS),
        ("lock_free_buckets.sql", LOCK_FREE_BUCKETS),
        ("retry_states.sql", RETRY_STATES),
        ("table_health.sql", TABLE_HEALTH),
    ]
    .into_iter()
    .map(|(name, sql)| (name.to_owned(), sql))
    .collect();
    for (folder, table) in [("region", &REGION), ("control", &CONTROL)] {
        files.extend(
            table
                .files()
                .into_iter()
                .map(|(name, sql)| (format!("{folder}/{name}"), sql)),
        );
    }
    files
}

impl TableSql {
    /// The statements of one table that come from files, by file name.
    fn files(&self) -> [(&'static str, &'static str); 18] {
        [
            ("claim_due_oldest.sql", self.claim_due_oldest),
            ("claim_due_newest.sql", self.claim_due_newest),
            ("claim_due_above.sql", self.claim_due_above),
            ("claim_shard.sql", self.claim_shard),
            ("claim_before_commit.sql", self.claim_before_commit),
            ("claim_one_before_commit.sql", self.claim_one_before_commit),
            ("commit_finished.sql", self.commit_finished),
            ("complete.sql", self.complete),
            ("delete_rows.sql", self.delete_rows),
            ("dead_letter.sql", self.dead_letter),
            ("reschedule.sql", self.reschedule),
            ("reset_schedule.sql", self.reset_schedule),
            ("replay_dead_letters.sql", self.replay_dead_letters),
            ("shard_depths.sql", self.shard_depths),
            ("deepest_shards.sql", self.deepest_shards),
            ("count_pending.sql", self.count_pending),
            ("backlog.sql", self.backlog),
            ("has_due.sql", self.has_due),
        ]
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use outbox_core::OutboxKind;

    use super::super::render::render;
    use super::super::{CONTROL, REGION};
    use super::sql_files;

    /// The `.sql` files under `dir`, by path relative to `root`, but for
    /// the sources of `outbox/`, rendered for each table (see
    /// `each_source_renders_the_files_of_both_tables`).
    fn read(root: &Path, dir: &Path, files: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path == root.join("outbox") {
                continue;
            }
            if path.is_dir() {
                read(root, &path, files);
            } else if path.extension().is_some_and(|e| e == "sql") {
                let name = path.strip_prefix(root).unwrap().to_string_lossy();
                let text = std::fs::read_to_string(&path).unwrap();
                files.insert(name.replace('\\', "/"), text);
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

    /// `sql` as words, whitespace aside: each `--` comment, to the end of
    /// its line, one word with its whitespace collapsed (so that a comment
    /// cannot take in code that followed it on the next line).
    fn words(sql: &str) -> Vec<String> {
        let mut words = Vec::new();
        for line in sql.lines() {
            let (code, comment) = line.split_once("--").unwrap_or((line, ""));
            words.extend(code.split_whitespace().map(str::to_owned));
            if line.contains("--") {
                let comment: Vec<&str> = comment.split_whitespace().collect();
                words.push(format!("--{}", comment.join(" ")));
            }
        }
        words
    }

    /// Where `rendered` and `file` part, with a few words around, if they do.
    fn first_difference(rendered: &[String], file: &[String]) -> Option<String> {
        let at = rendered
            .iter()
            .zip(file)
            .position(|(a, b)| a != b)
            .or((rendered.len() != file.len()).then(|| rendered.len().min(file.len())))?;
        let around =
            |words: &[String]| words[at.saturating_sub(8)..(at + 8).min(words.len())].join(" ");
        Some(format!(
            "at word {at}:\n  rendered: {}\n  file:     {}",
            around(rendered),
            around(file)
        ))
    }

    /// Each source of `outbox/` renders, for each table, the statement of
    /// that table's file (`region/`, `control/`) that the store sends,
    /// comments included, whitespace aside.
    #[test]
    fn each_source_renders_the_files_of_both_tables() {
        let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/postgres/sql/outbox");
        for (kind, files) in [
            (OutboxKind::Region, &REGION),
            (OutboxKind::Control, &CONTROL),
        ] {
            for (name, file) in files.files() {
                let source = std::fs::read_to_string(sources.join(name)).unwrap();
                let rendered = render(&source, kind);
                if let Some(difference) = first_difference(&words(&rendered), &words(file)) {
                    panic!("{}/{name} {difference}", kind.as_str());
                }
            }
        }
        let mut names: Vec<String> = std::fs::read_dir(&sources)
            .unwrap()
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".sql"))
            .collect();
        names.sort();
        let mut listed: Vec<String> = REGION
            .files()
            .iter()
            .map(|(name, _)| (*name).to_owned())
            .collect();
        listed.sort();
        assert_eq!(names, listed, "a source that is no table's statement");
    }
}
