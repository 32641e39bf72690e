//! The SQLite store's statements on the outbox tables, rendered from
//! `sql/outbox/` by [`crate::store::render`] (no fragments).

use outbox_core::OutboxKind;

/// `source` rendered for the outbox table of `kind`.
pub(super) fn render(source: &str, kind: OutboxKind) -> String {
    crate::store::render::render(source, kind, crate::store::render::no_fragments)
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use outbox_core::OutboxKind;

    use crate::store::render::testing::sql_files_of;

    use super::render;

    fn folder() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/sqlite/sql")
    }

    /// `sql` without its `--` comments, its whitespace collapsed.
    fn code(sql: &str) -> String {
        sql.lines()
            .map(|line| line.split_once("--").map_or(line, |(code, _)| code))
            .flat_map(str::split_whitespace)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Each source renders, for each table, the statement of that table's
    /// own file, comments and whitespace aside.
    #[test]
    fn each_source_renders_each_tables_own_file() {
        let sources = sql_files_of(&folder().join("outbox"));
        assert_eq!(sources.len(), 9);
        for (name, source) in sources {
            for (kind, dir) in [
                (OutboxKind::Region, "region"),
                (OutboxKind::Control, "control"),
            ] {
                let file = std::fs::read_to_string(folder().join(dir).join(&name)).unwrap();
                assert_eq!(code(&render(&source, kind)), code(&file), "{dir}/{name}");
            }
        }
    }
}
