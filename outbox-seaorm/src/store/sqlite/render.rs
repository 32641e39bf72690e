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

    use crate::store::render::testing::{check_differences, sql_files_of};

    use super::render;

    fn folder() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/sqlite/sql/outbox")
    }

    /// The tables' statements differ where `sql/outbox/differences.txt`
    /// says, and nowhere else.
    #[test]
    fn the_tables_statements_differ_as_the_snapshot_says() {
        check_differences(&folder(), render);
    }

    /// Every source is a statement the store sends.
    #[test]
    fn every_source_is_sent() {
        let store = include_str!("mod.rs");
        for (name, _) in sql_files_of(&folder()) {
            let include = format!("include_str!(\"sql/outbox/{name}\")");
            assert!(
                store.contains(&include),
                "sql/outbox/{name} is sent nowhere"
            );
        }
    }
}
