//! Short names for SQL statements.

use std::collections::HashMap;
use std::sync::OnceLock;

/// The longest label made from a first line, in characters.
const MAX_LABEL: usize = 60;

/// A short, stable name for `sql`:
///
/// - the PostgreSQL store's own statements: the name
///   [`sql_files`](outbox_seaorm::store::postgres::sql_files) gives them,
///   the file they come from relative to the store's `sql` folder
///   (`renew.sql`), or the table and file of one rendered per outbox table
///   (`region/claim_shard.sql`), whitespace around the text aside (as
///   `pg_stat_statements` shows it);
/// - other SQL that opens with a `--` comment: that comment's first line;
/// - `INSERT INTO t …`, `UPDATE t …`, `DELETE FROM t …`: those words
///   (`INSERT INTO widgets`);
/// - anything else: its first line, whitespace collapsed, at most 60
///   characters (`BEGIN`, `SELECT 1`).
///
/// ```
/// use outbox_testing::database::wire::label;
/// assert_eq!(label("INSERT INTO widgets (name) VALUES ($1) RETURNING id"), "INSERT INTO widgets");
/// assert_eq!(label("-- Does a thing.\n-- More.\nSELECT 1"), "-- Does a thing.");
/// assert_eq!(label("  BEGIN  "), "BEGIN");
/// ```
pub fn label(sql: &str) -> String {
    if let Some(file) = store_statements().get(sql.trim()) {
        return file.clone();
    }
    let text = sql.trim_start();
    let first_line = text.lines().next().unwrap_or("").trim();
    if first_line.starts_with("--") {
        return shorten(first_line);
    }
    let words: Vec<&str> = text.split_whitespace().take(3).collect();
    let upper: Vec<String> = words.iter().map(|w| w.to_ascii_uppercase()).collect();
    let table = |i: usize| {
        words
            .get(i)
            .map(|w| w.split('(').next().unwrap_or(w).to_owned())
    };
    match upper.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["INSERT", "INTO", ..] | ["DELETE", "FROM", ..] => {
            if let Some(table) = table(2) {
                return format!("{} {} {table}", upper[0], upper[1]);
            }
        }
        ["UPDATE", ..] => {
            if let Some(table) = table(1) {
                return format!("UPDATE {table}");
            }
        }
        _ => {}
    }
    shorten(&first_line.split_whitespace().collect::<Vec<_>>().join(" "))
}

fn shorten(line: &str) -> String {
    if line.chars().count() <= MAX_LABEL {
        line.to_owned()
    } else {
        let cut: String = line.chars().take(MAX_LABEL - 1).collect();
        format!("{}…", cut.trim_end())
    }
}

/// Whether `sql` holds nothing to execute (whitespace, comments, `;`).
pub(super) fn is_blank(sql: &str) -> bool {
    let mut rest = sql;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ';');
        if let Some(comment) = rest.strip_prefix("--") {
            rest = comment.split_once('\n').map_or("", |(_, after)| after);
        } else if let Some(comment) = rest.strip_prefix("/*") {
            rest = comment.split_once("*/").map_or("", |(_, after)| after);
        } else {
            return rest.is_empty();
        }
    }
}

/// The PostgreSQL store's statements, trimmed text → their name in
/// [`outbox_seaorm::store::postgres::sql_files`].
fn store_statements() -> &'static HashMap<String, String> {
    static FILES: OnceLock<HashMap<String, String>> = OnceLock::new();
    FILES.get_or_init(|| {
        outbox_seaorm::store::postgres::sql_files()
            .into_iter()
            .map(|(name, sql)| (sql.trim().to_owned(), name))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_short_and_stable() {
        assert_eq!(label("BEGIN"), "BEGIN");
        assert_eq!(label("COMMIT"), "COMMIT");
        assert_eq!(label("select 1"), "select 1");
        assert_eq!(
            label("INSERT INTO region_outbox(shard_scope) VALUES ($1)"),
            "INSERT INTO region_outbox"
        );
        assert_eq!(label("delete from t where id = 1"), "DELETE FROM t");
        assert_eq!(label("UPDATE t SET a = 1"), "UPDATE t");
        assert_eq!(label("-- One.\n-- Two.\nSELECT 1"), "-- One.");
        let long = format!("SELECT {}", "x, ".repeat(40));
        assert_eq!(label(&long).chars().count(), MAX_LABEL);
        assert!(label(&long).ends_with('…'));
    }

    #[test]
    fn the_stores_statements_are_named_after_their_files() {
        let (_, claim) = outbox_seaorm::store::postgres::sql_files()
            .into_iter()
            .find(|(name, _)| name == "region/claim_shard.sql")
            .unwrap();
        assert_eq!(label(claim), "region/claim_shard.sql");
        assert_eq!(label(claim.trim()), "region/claim_shard.sql");
        assert!(store_statements().len() > 10, "{:?}", store_statements());
    }

    #[test]
    fn blank_sql_is_recognised() {
        assert!(is_blank(""));
        assert!(is_blank("  ;\n"));
        assert!(is_blank("/* SQLx ping */"));
        assert!(is_blank("-- nothing\n"));
        assert!(!is_blank("-- something\nSELECT 1"));
        assert!(!is_blank("/* x */ SELECT 1"));
    }
}
