//! The statements on the outbox tables: each written once, in each
//! store's `sql/outbox/`, and rendered for each table by substituting a few
//! named parts, once per process (when the first store is built).
//!
//! The tables differ in their shard key alone: the control table keys a
//! shard by `(region_name, shard_scope, shard_identifier)`, the region table
//! by `(shard_scope, shard_identifier)`. The parts say where that shows; a
//! part is written `{name}` or `{name:argument}`, and renders, for
//! `region_outbox` | `control_outbox`:
//!
//! - `{table}`: `region_outbox` | `control_outbox`.
//! - `{key:a}`: alias `a`'s shard key as a column list:
//!   `a.shard_scope, a.shard_identifier` |
//!   `a.region_name, a.shard_scope, a.shard_identifier`; `{key}` the same
//!   columns unqualified.
//! - `{key_eq:a=b}`: `a`'s shard key equals `b`'s:
//!   `a.shard_scope = b.shard_scope AND a.shard_identifier = b.shard_identifier` |
//!   `a.region_name = b.region_name AND ` and the same; `{key_eq:a=$2,$3,$4}`
//!   equals the parameters (region, scope, identifier), where the region
//!   table's statement compares no region.
//! - `{region:a or X}`: the region of `a`'s shard, where a statement needs
//!   one (the drain's own tables key every shard by a region): `X`, the
//!   region table's stand-in written at the site (`''`, as those tables
//!   store it; `NULL::text` in a claim's rows; with `AS region_name` where
//!   the control table's column names itself) | `a.region_name`;
//!   `{region or X}` unqualified.
//! - `{include:name}`: a fragment of the store's (PostgreSQL's
//!   `sql/outbox/include/name.sql`), without its opening `--` lines (they
//!   say what it is and where it goes), its parts rendered in turn: a block
//!   that several statements share. Where the tables' statements are shaped
//!   differently, the fragment has one file per table, `name.region.sql` |
//!   `name.control.sql`: only the backlog's walk over the scopes, a loose
//!   scan of each table's own index.
//!
//! What the parts make of each statement, control's words next to
//! region's, is in each store's `sql/outbox/differences.txt`, which a test
//! keeps current: a change to a part or to a table's own fragment shows
//! there.

use outbox_core::OutboxKind;

/// The fragment an `{include:name}` stands for, in `kind`'s table's
/// statements.
pub(crate) type Fragments = fn(&str, OutboxKind) -> &'static str;

/// For a store without fragments.
pub(crate) fn no_fragments(name: &str, _: OutboxKind) -> &'static str {
    panic!("no fragment `{name}`: this store's statements include none")
}

/// `source` rendered for the outbox table of `kind`, its `{include:…}`
/// parts taken from `fragments`.
///
/// # Panics
///
/// On a part not described in the module docs: the sources are constants,
/// every one of them rendered by the tests.
pub(crate) fn render(source: &str, kind: OutboxKind, fragments: Fragments) -> String {
    let mut out = String::with_capacity(source.len() + source.len() / 8);
    let mut rest = source;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            panic!("an unclosed part in {source}");
        };
        part(&rest[open + 1..open + close], kind, fragments, &mut out);
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

/// Appends `part` (what is between the braces) rendered for `kind`.
fn part(part: &str, kind: OutboxKind, fragments: Fragments, out: &mut String) {
    let control = kind == OutboxKind::Control;
    // The name, then `:argument`, or (`{region or X}`) straight on.
    let end = part
        .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
        .unwrap_or(part.len());
    let (name, rest) = part.split_at(end);
    let argument = rest.strip_prefix(':').unwrap_or(rest);
    match name {
        "table" if argument.is_empty() => out.push_str(table(kind)),
        "key" => {
            let a = qualifier(argument);
            if control {
                out.push_str(&format!("{a}region_name, "));
            }
            out.push_str(&format!("{a}shard_scope, {a}shard_identifier"));
        }
        "key_eq" => {
            let Some((a, b)) = argument.split_once('=') else {
                panic!("`{{{part}}}`: `key_eq:a=b` or `key_eq:a=$r,$s,$i`");
            };
            let [region, scope, identifier] = match b.split(',').collect::<Vec<_>>()[..] {
                [b] => ["region_name", "shard_scope", "shard_identifier"]
                    .map(|column| format!("{b}.{column}")),
                [region, scope, identifier] if b.starts_with('$') => {
                    [region, scope, identifier].map(str::to_owned)
                }
                _ => panic!("`{{{part}}}`: `key_eq:a=b` or `key_eq:a=$r,$s,$i`"),
            };
            let a = qualifier(a);
            if control {
                out.push_str(&format!("{a}region_name = {region} AND "));
            }
            out.push_str(&format!(
                "{a}shard_scope = {scope} AND {a}shard_identifier = {identifier}"
            ));
        }
        "region" => {
            let Some((a, stand_in)) = argument.split_once(" or ") else {
                panic!("`{{{part}}}`: `region:a or X` or `region or X`");
            };
            if control {
                out.push_str(&format!("{}region_name", qualifier(a)));
            } else {
                out.push_str(stand_in);
            }
        }
        "include" => {
            let fragment = fragments(argument, kind);
            let body = fragment
                .split_inclusive('\n')
                .skip_while(|line| line.starts_with("--"))
                .collect::<String>();
            out.push_str(render(&body, kind, fragments).trim_end());
        }
        _ => panic!("unknown part `{{{part}}}` (see `store::render`)"),
    }
}

/// The outbox table of `kind`.
fn table(kind: OutboxKind) -> &'static str {
    match kind {
        OutboxKind::Region => "region_outbox",
        OutboxKind::Control => "control_outbox",
    }
}

/// `alias.`, or nothing for no alias.
fn qualifier(alias: &str) -> String {
    assert!(
        alias.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "not an alias: `{alias}`"
    );
    if alias.is_empty() {
        String::new()
    } else {
        format!("{alias}.")
    }
}

/// What the stores' render tests share: their sources as words, and the
/// snapshot of how the tables' statements differ.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::Path;

    use outbox_core::OutboxKind;

    /// The `.sql` files of `dir`, by name, with their text.
    pub(crate) fn sql_files_of(dir: &Path) -> Vec<(String, String)> {
        let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|e| e == "sql"))
            .map(|path| {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&path).unwrap())
            })
            .collect();
        files.sort();
        files
    }

    /// `sql` as words, whitespace aside: each `--` comment, to the end of
    /// its line, one word with its whitespace collapsed (so that a comment
    /// cannot take in code that followed it on the next line).
    pub(crate) fn words(sql: &str) -> Vec<String> {
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

    /// One step from `a` to `b`.
    #[derive(Clone, Copy, PartialEq)]
    enum Step<'a> {
        Same(&'a str),
        Out(&'a str),
        In(&'a str),
    }

    /// The steps from `a` to `b` that keep their longest common
    /// subsequence.
    fn steps<'a>(a: &'a [String], b: &'a [String]) -> Vec<Step<'a>> {
        // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
        let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
        for i in (0..a.len()).rev() {
            for j in (0..b.len()).rev() {
                lcs[i][j] = if a[i] == b[j] {
                    lcs[i + 1][j + 1] + 1
                } else {
                    lcs[i + 1][j].max(lcs[i][j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        let mut steps = Vec::new();
        while i < a.len() || j < b.len() {
            if i < a.len() && j < b.len() && a[i] == b[j] {
                steps.push(Step::Same(&a[i]));
                i += 1;
                j += 1;
            } else if j == b.len() || (i < a.len() && lcs[i + 1][j] >= lcs[i][j + 1]) {
                steps.push(Step::Out(&a[i]));
                i += 1;
            } else {
                steps.push(Step::In(&b[j]));
                j += 1;
            }
        }
        steps
    }

    /// Where `a` and `b` differ, word by word, one line a place: what `a`
    /// has there as `[-…-]`, what `b` has as `{+…+}`, between up to three
    /// unchanged words each side (a comment among those shown as `--…`).
    /// Places fewer than four unchanged words apart make one line.
    pub(crate) fn word_diff(a: &[String], b: &[String]) -> Vec<String> {
        const AROUND: usize = 3;
        let steps = steps(a, b);
        let changed: Vec<usize> = (0..steps.len())
            .filter(|&at| !matches!(steps[at], Step::Same(_)))
            .collect();
        let mut lines = Vec::new();
        let mut next = 0;
        while next < changed.len() {
            let first = changed[next];
            let mut last = first;
            while next < changed.len() && changed[next] <= last + AROUND + 1 {
                last = changed[next];
                next += 1;
            }
            let from = first.saturating_sub(AROUND);
            let to = (last + 1 + AROUND).min(steps.len());
            let mut line = String::new();
            let mut at = from;
            while at < to {
                let run = |kind: fn(Step<'_>) -> Option<&str>, at: &mut usize| {
                    let mut words = Vec::new();
                    while *at < to {
                        match kind(steps[*at]) {
                            Some(word) => words.push(word),
                            None => break,
                        }
                        *at += 1;
                    }
                    words.join(" ")
                };
                let word = match steps[at] {
                    Step::Same(word) => {
                        at += 1;
                        if word.starts_with("--") {
                            "--…".to_owned()
                        } else {
                            word.to_owned()
                        }
                    }
                    Step::Out(_) => format!(
                        "[-{}-]",
                        run(
                            |step| match step {
                                Step::Out(word) => Some(word),
                                _ => None,
                            },
                            &mut at
                        )
                    ),
                    Step::In(_) => format!(
                        "{{+{}+}}",
                        run(
                            |step| match step {
                                Step::In(word) => Some(word),
                                _ => None,
                            },
                            &mut at
                        )
                    ),
                };
                if !line.is_empty() {
                    line.push(' ');
                }
                line.push_str(&word);
            }
            lines.push(line);
        }
        lines
    }

    /// What the rendered statements of each table differ in, for a reviewer:
    /// every `.sql` source of `folder`, rendered by `render`.
    pub(crate) fn differences(folder: &Path, render: fn(&str, OutboxKind) -> String) -> String {
        let mut out = String::from(
            "# How each statement rendered for control_outbox differs from the one\n\
             # rendered for region_outbox, word by word (whitespace aside, a comment\n\
             # one word): [-region's-]{+control's+}, with the words around.\n\
             # Written by the store's render tests, with\n\
             # OUTBOX_UPDATE_SNAPSHOT=1; read it when it changes.\n",
        );
        for (name, source) in sql_files_of(folder) {
            let region = words(&render(&source, OutboxKind::Region));
            let control = words(&render(&source, OutboxKind::Control));
            out.push_str(&format!("\n{name}\n"));
            for line in word_diff(&region, &control) {
                out.push_str(&format!("    {line}\n"));
            }
        }
        out
    }

    /// Fails unless `folder/differences.txt` says what [`differences`] finds
    /// (written again with `OUTBOX_UPDATE_SNAPSHOT=1`).
    pub(crate) fn check_differences(folder: &Path, render: fn(&str, OutboxKind) -> String) {
        let path = folder.join("differences.txt");
        let now = differences(folder, render);
        if std::env::var_os("OUTBOX_UPDATE_SNAPSHOT").is_some() {
            std::fs::write(&path, &now).unwrap();
        }
        let snapshot = std::fs::read_to_string(&path).unwrap_or_default();
        if snapshot != now {
            let first = snapshot
                .lines()
                .zip(now.lines())
                .find(|(then, now)| then != now);
            panic!(
                "the tables' statements differ otherwise than {} says (first: {first:?}); \
                 if that is meant, write it again with OUTBOX_UPDATE_SNAPSHOT=1 and read its diff",
                path.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use outbox_core::OutboxKind::{Control, Region};

    use super::testing::word_diff;

    fn render(source: &str, kind: outbox_core::OutboxKind) -> String {
        super::render(source, kind, super::no_fragments)
    }

    /// The parts as the module docs describe them.
    #[test]
    fn each_part_renders_as_documented() {
        let both = |source: &str| [render(source, Region), render(source, Control)];
        assert_eq!(both("{table}"), ["region_outbox", "control_outbox"]);
        assert_eq!(
            both("{key:o}"),
            [
                "o.shard_scope, o.shard_identifier",
                "o.region_name, o.shard_scope, o.shard_identifier"
            ]
        );
        assert_eq!(
            both("{key}"),
            [
                "shard_scope, shard_identifier",
                "region_name, shard_scope, shard_identifier"
            ]
        );
        assert_eq!(
            both("{key_eq:o=sh}"),
            [
                "o.shard_scope = sh.shard_scope AND o.shard_identifier = sh.shard_identifier",
                "o.region_name = sh.region_name AND o.shard_scope = sh.shard_scope \
                 AND o.shard_identifier = sh.shard_identifier"
            ]
        );
        assert_eq!(
            both("{key_eq:o=$2,$3,$4}"),
            [
                "o.shard_scope = $3 AND o.shard_identifier = $4",
                "o.region_name = $2 AND o.shard_scope = $3 AND o.shard_identifier = $4"
            ]
        );
        assert_eq!(
            both("{region:sh or NULL::text} AS region_name"),
            ["NULL::text AS region_name", "sh.region_name AS region_name"]
        );
        assert_eq!(both("{region or ''::text}"), ["''::text", "region_name"]);
        // A fragment: its opening comment dropped, its parts rendered.
        fn shared(name: &str, _: outbox_core::OutboxKind) -> &'static str {
            assert_eq!(name, "shared");
            "-- A block two statements share.\nSELECT {key} FROM {table}\n"
        }
        assert_eq!(
            [Region, Control].map(|kind| super::render("({include:shared})", kind, shared)),
            [
                "(SELECT shard_scope, shard_identifier FROM region_outbox)",
                "(SELECT region_name, shard_scope, shard_identifier FROM control_outbox)"
            ]
        );
    }

    #[test]
    #[should_panic(expected = "unknown part `{keys:o}`")]
    fn an_unknown_part_is_refused() {
        render("SELECT {keys:o}", Control);
    }

    /// A word diff finds what was taken out and put in.
    #[test]
    fn a_word_diff_shows_each_change_with_its_context() {
        let split = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            word_diff(
                &split("a b c d e f g h i j k l"),
                &split("a b x c d f g h i j k y l")
            ),
            ["a b {+x+} c d [-e-] f g h", "i j k {+y+} l"]
        );
        assert_eq!(
            word_diff(&split("a --b c d"), &split("a --b c e")),
            ["a --… c [-d-] {+e+}"]
        );
    }
}
