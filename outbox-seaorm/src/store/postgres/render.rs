//! The PostgreSQL store's statements on the outbox tables, rendered from
//! `sql/outbox/` by [`crate::store::render`], with the fragments of
//! `sql/outbox/include/`.

use outbox_core::OutboxKind;

/// `source` rendered for the outbox table of `kind`.
pub(super) fn render(source: &str, kind: OutboxKind) -> String {
    crate::store::render::render(source, kind, fragment)
}

/// The fragment `{include:name}` stands for, in `kind`'s table's statements.
fn fragment(name: &str, kind: OutboxKind) -> &'static str {
    match (name, kind) {
        ("claim_buckets", _) => include_str!("sql/outbox/include/claim_buckets.sql"),
        ("claim_leases", _) => include_str!("sql/outbox/include/claim_leases.sql"),
        ("backlog_scopes", OutboxKind::Region) => {
            include_str!("sql/outbox/include/backlog_scopes.region.sql")
        }
        ("backlog_scopes", OutboxKind::Control) => {
            include_str!("sql/outbox/include/backlog_scopes.control.sql")
        }
        ("backlog_by_scope", OutboxKind::Region) => {
            include_str!("sql/outbox/include/backlog_by_scope.region.sql")
        }
        ("backlog_by_scope", OutboxKind::Control) => {
            include_str!("sql/outbox/include/backlog_by_scope.control.sql")
        }
        _ => panic!("no fragment `{name}` in sql/outbox/include/"),
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use crate::store::render::testing::{check_differences, sql_files_of};

    use super::render;

    fn folder() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/postgres/sql/outbox")
    }

    #[test]
    fn every_fragment_is_included_somewhere() {
        let sources = sql_files_of(&folder());
        for (file, _) in sql_files_of(&folder().join("include")) {
            let name = ["region.sql", "control.sql", "sql"]
                .iter()
                .find_map(|end| file.strip_suffix(end))
                .unwrap()
                .trim_end_matches('.');
            let part = format!("{{include:{name}}}");
            assert!(
                sources.iter().any(|(_, source)| source.contains(&part)),
                "include/{file} is included nowhere"
            );
        }
    }

    /// The tables' statements differ where `differences.txt` says, and
    /// nowhere else: a change to a part or to a table's own fragment shows
    /// there.
    #[test]
    fn the_tables_statements_differ_as_the_snapshot_says() {
        check_differences(&folder(), render);
    }
}
