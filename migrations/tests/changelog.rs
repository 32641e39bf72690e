//! The CHANGELOG's migrations list names every migration: an upgrade that
//! follows it runs all of them, so the worker's schema check
//! (`outbox_seaorm::check_schema`) finds nothing missing at start.
//!
//! A migration is known from two places, which must agree with the list:
//! its file in `migrations/src` (`m<date>_<number>_<name>.rs`) and its
//! name in [`outbox_migrations::migrations_with_partition_ring`] (which
//! holds [`outbox_migrations::migrations`] and the opted-into ring). The
//! list is every bullet of a `### Migrations` section of `CHANGELOG.md`,
//! in any release, that opens with a migration's name in backticks.
//!
//! It reads the workspace's `CHANGELOG.md` at run time (from
//! `CARGO_MANIFEST_DIR/..`): the file is not part of the crate's package.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeSet;
use std::path::Path;

/// Whether `name` has a migration's shape: `m20261121_000001_create_outbox_tables`.
fn is_migration_name(name: &str) -> bool {
    let mut parts = name.splitn(3, '_');
    let (Some(date), Some(number), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    date.len() == 9
        && date.starts_with('m')
        && date[1..].bytes().all(|b| b.is_ascii_digit())
        && number.len() == 6
        && number.bytes().all(|b| b.is_ascii_digit())
        && !rest.is_empty()
        && rest
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The migrations each `### Migrations` section of `changelog` lists, in
/// order: each bullet that opens with a name in backticks.
fn listed(changelog: &str) -> Vec<Vec<String>> {
    let mut sections: Vec<Vec<String>> = Vec::new();
    let mut in_list = false;
    for line in changelog.lines() {
        if line.starts_with('#') {
            in_list = line.trim_start_matches('#').trim() == "Migrations";
            if in_list {
                sections.push(Vec::new());
            }
            continue;
        }
        if !in_list {
            continue;
        }
        if let Some(name) = line
            .strip_prefix("- `")
            .and_then(|rest| rest.split('`').next())
        {
            if is_migration_name(name) {
                sections.last_mut().unwrap().push(name.to_owned());
            }
        }
    }
    sections
}

/// The migrations of `migrations/src`, by file name.
fn files(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let stem = name.strip_suffix(".rs")?;
            is_migration_name(stem).then(|| stem.to_owned())
        })
        .collect()
}

#[test]
fn the_changelog_lists_every_migration() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let changelog_path = crate_dir.parent().unwrap().join("CHANGELOG.md");
    let changelog = std::fs::read_to_string(&changelog_path).unwrap();
    let sections = listed(&changelog);
    let listed_set: BTreeSet<String> = sections.iter().flatten().cloned().collect();

    let in_src = files(&crate_dir.join("src"));
    let in_code: BTreeSet<String> = outbox_migrations::migrations_with_partition_ring()
        .iter()
        .map(|migration| migration.name().to_owned())
        .collect();
    assert!(
        in_src.len() >= 15 && in_code.len() >= 15,
        "only {} migration files and {} migrations found: is the crate still there?",
        in_src.len(),
        in_code.len()
    );
    assert_eq!(
        in_src, in_code,
        "the files in migrations/src and migrations_with_partition_ring() disagree"
    );

    let missing: Vec<&String> = in_src.difference(&listed_set).collect();
    assert!(
        missing.is_empty(),
        "{} lists no `### Migrations` bullet for {missing:?}: add one line each, \
         `- `<name>`: what it does`, so that an upgrade that follows the list runs it",
        changelog_path.display()
    );
    let unknown: Vec<&String> = listed_set.difference(&in_src).collect();
    assert!(
        unknown.is_empty(),
        "CHANGELOG.md lists migrations that do not exist: {unknown:?}"
    );
    for section in &sections {
        let mut in_order = section.clone();
        in_order.sort();
        in_order.dedup();
        assert_eq!(
            section, &in_order,
            "a `### Migrations` list of CHANGELOG.md is out of order, or names one twice"
        );
    }
}

/// The longest entry, in characters: three lines of a hundred.
const LONGEST_ENTRY: usize = 300;

/// Each bullet or numbered step of `changelog` with its continuation
/// lines, joined: `(line number, text)`.
fn entries(changelog: &str) -> Vec<(usize, String)> {
    let mut entries: Vec<(usize, String)> = Vec::new();
    let mut open = false;
    for (n, line) in changelog.lines().enumerate() {
        let numbered = line.split_once(". ").is_some_and(|(number, _)| {
            !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit())
        });
        if line.starts_with("- ") || numbered {
            entries.push((n + 1, line.to_owned()));
            open = true;
        } else if open && line.starts_with(' ') && !line.trim().is_empty() {
            let (_, text) = entries.last_mut().unwrap();
            text.push(' ');
            text.push_str(line.trim());
        } else {
            open = false;
        }
    }
    entries
}

#[test]
fn no_changelog_entry_is_over_three_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).unwrap();
    let entries = entries(&changelog);
    assert!(entries.len() >= 20, "only {} entries found", entries.len());
    let long: Vec<String> = entries
        .iter()
        .filter(|(_, text)| text.chars().count() > LONGEST_ENTRY)
        .map(|(line, text)| format!("  line {line}: {} characters", text.chars().count()))
        .collect();
    assert!(
        long.is_empty(),
        "CHANGELOG.md entries over three lines ({LONGEST_ENTRY} characters): say what a user \
         sees, and leave the rest to the docs and git:\n{}",
        long.join("\n")
    );
}

#[test]
fn a_list_is_read_from_migrations_sections_only() {
    let changelog = "\
## [Unreleased]

### Added

- `m20261121_000009_elsewhere`: not a migrations list.

### Migrations

Run them first:

- `m20261121_000001_first`: creates the tables.
- `m20261121_000002_second`: and more.
- `outbox_fence`: not a migration.

### Upgrade notes

- `m20261121_000003_third`: not listed here.

## [0.1.0]

### Migrations

- `m20261120_000000_older`: an earlier release's.
";
    assert_eq!(
        listed(changelog),
        vec![
            vec!["m20261121_000001_first", "m20261121_000002_second"],
            vec!["m20261120_000000_older"],
        ]
    );
}

#[test]
fn entries_join_their_continuation_lines() {
    let changelog =
        "### Added\n\n- **added**: one,\n  two.\n- three.\n\n1. Step one,\n   wrapped.\n\nProse.\n";
    assert_eq!(
        entries(changelog),
        vec![
            (3, "- **added**: one, two.".to_owned()),
            (5, "- three.".to_owned()),
            (7, "1. Step one, wrapped.".to_owned()),
        ]
    );
}
