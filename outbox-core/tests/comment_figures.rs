//! No comment in any crate's `src` quotes a benchmark figure: comments say
//! what the code does and why; figures live in `docs/benchmarks.md`, next
//! to the bench that produces them, and the history of experiments in git.
//! A comment that rests on a measurement names the bench, not its result.
//!
//! It reads every `.rs` and `.sql` file under each crate's `src`, takes its
//! comments (`//`, `///`, `//!`, `/* */`; `--` in SQL; string literals and
//! the code blocks of doc comments left out), and fails on:
//!
//! - a ratio: a number followed by `×` or `x` (`0.67×`, `1.3–1.6x of`),
//!   but not a product (`64 × 1024`) nor hex or a format (`0x1f`, `{:08x}`);
//! - a rate: a number of messages, rows, requests, writes, deliveries or
//!   jobs per second written with `/s` (`78,289 msgs/s`, `25k msg/s`);
//! - a percentile with its value (`p99 14.3 ms`);
//! - pages a plan read (`4,915 buffers`), or a percentage gained or lost
//!   (`3% more`, `12 % slower`);
//! - a date (`2026-11-27`), unless it is a value in backticks
//!   (`` `2016-08-01` ``) or a timestamp (`2026-11-21T19:27:37`).
//!
//! Defaults and timeouts with their units (`Default: 100 ms`) are not
//! figures and pass.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::{Path, PathBuf};

/// The crates whose `src` the test reads, relative to the workspace root.
const CRATES: &[&str] = &[
    "outbox-core",
    "outbox-core/testing",
    "outbox-seaorm",
    "outbox-seaorm/derive",
    "outbox-axum",
    "migrations",
    "example-app",
];

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs" || e == "sql") {
            out.push(path);
        }
    }
}

/// One line of a comment: its line number (from 1) and its text.
type CommentLine = (usize, String);

/// The comments of Rust source `text`, line by line, without string and
/// char literals (raw strings included) and without the lines of fenced
/// code blocks in doc comments (doctests are code).
fn rust_comments(text: &str) -> Vec<CommentLine> {
    let chars: Vec<char> = text.chars().collect();
    let mut out: Vec<CommentLine> = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let at = |i: usize, s: &str| {
        s.chars()
            .enumerate()
            .all(|(k, c)| chars.get(i + k) == Some(&c))
    };
    let ident = |c: Option<&char>| c.is_some_and(|c| c.is_alphanumeric() || *c == '_');
    let mut in_fence = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if at(i, "//") {
            let start = i;
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            let comment: String = chars[start..i].iter().collect();
            let body = comment
                .trim_start_matches('/')
                .trim_start_matches('!')
                .trim();
            if body.starts_with("```") {
                in_fence = !in_fence;
            } else if !in_fence {
                out.push((line, comment));
            }
        } else if at(i, "/*") {
            let mut depth = 0;
            let mut current = String::new();
            while i < chars.len() {
                if at(i, "/*") {
                    depth += 1;
                    current.push_str("/*");
                    i += 2;
                } else if at(i, "*/") {
                    depth -= 1;
                    current.push_str("*/");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else if chars[i] == '\n' {
                    out.push((line, std::mem::take(&mut current)));
                    line += 1;
                    i += 1;
                } else {
                    current.push(chars[i]);
                    i += 1;
                }
            }
            out.push((line, current));
        } else if (c == 'r' || (c == 'b' && chars.get(i + 1) == Some(&'r')))
            && !ident(i.checked_sub(1).and_then(|p| chars.get(p)))
            && {
                let mut k = i + if c == 'b' { 2 } else { 1 };
                while chars.get(k) == Some(&'#') {
                    k += 1;
                }
                chars.get(k) == Some(&'"')
            }
        {
            // A raw string: r"…", r#"…"#, br#"…"#.
            i += if c == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while chars[i] == '#' {
                hashes += 1;
                i += 1;
            }
            i += 1;
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            while i < chars.len() && !at(i, &close) {
                if chars[i] == '\n' {
                    line += 1;
                }
                i += 1;
            }
            i += close.chars().count();
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if chars.get(i) == Some(&'\n') {
                    line += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' {
            // A char literal ('"', '\'', '\u{7f}') or a lifetime ('a).
            if chars.get(i + 1) == Some(&'\\') {
                // The quote, the backslash and the escaped character.
                i += 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The comments of SQL `text` (`--` to the end of the line, `/* */`),
/// line by line, outside quoted strings and identifiers.
fn sql_comments(text: &str) -> Vec<CommentLine> {
    let mut out = Vec::new();
    let mut in_block = false;
    let mut quote: Option<char> = None;
    for (n, line) in text.lines().enumerate() {
        let chars: Vec<char> = line.chars().collect();
        let mut current = String::new();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            let next = chars.get(i + 1).copied();
            if in_block {
                if c == '*' && next == Some('/') {
                    in_block = false;
                    i += 2;
                } else {
                    current.push(c);
                    i += 1;
                }
            } else if let Some(q) = quote {
                if c == q {
                    quote = None;
                }
                i += 1;
            } else if c == '-' && next == Some('-') {
                current.extend(&chars[i..]);
                break;
            } else if c == '/' && next == Some('*') {
                in_block = true;
                i += 2;
            } else {
                if c == '\'' || c == '"' {
                    quote = Some(c);
                }
                i += 1;
            }
        }
        if !current.is_empty() {
            out.push((n + 1, current));
        }
    }
    out
}

/// A number at `chars[start..]` that does not continue a word or a format
/// (`u8`, `{:08x}`, `0x1f`): its end, past digits, `,` groups and one
/// decimal part.
fn number_at(chars: &[char], start: usize) -> Option<usize> {
    if !chars[start].is_ascii_digit() {
        return None;
    }
    if let Some(prev) = start.checked_sub(1).map(|p| chars[p]) {
        if prev.is_alphanumeric() || matches!(prev, '_' | ':' | '{' | '.' | ',') {
            return None;
        }
    }
    let mut end = start;
    while end < chars.len() {
        let c = chars[end];
        let digit_follows = chars.get(end + 1).is_some_and(char::is_ascii_digit);
        if c.is_ascii_digit() || ((c == ',' || c == '.') && digit_follows) {
            end += 1;
        } else {
            break;
        }
    }
    Some(end)
}

fn skip_spaces(chars: &[char], mut i: usize) -> usize {
    while chars.get(i) == Some(&' ') {
        i += 1;
    }
    i
}

fn word_at(chars: &[char], i: usize) -> String {
    chars[i.min(chars.len())..]
        .iter()
        .take_while(|c| c.is_alphanumeric())
        .collect()
}

/// `0.67×`, `0.71x of`; not `64 × 1024`.
fn ratio_at(chars: &[char], start: usize) -> Option<usize> {
    let end = number_at(chars, start)?;
    let sign = skip_spaces(chars, end);
    if sign > end + 1 || !matches!(chars.get(sign), Some('×' | 'x')) {
        return None;
    }
    let after = chars.get(sign + 1);
    if after.is_some_and(|c| c.is_alphanumeric() || *c == '_') {
        return None;
    }
    let next = skip_spaces(chars, sign + 1);
    if chars.get(next).is_some_and(char::is_ascii_digit) {
        return None;
    }
    Some(sign + 1)
}

/// `78,289 msgs/s`, `25-36k msg/s`, `1,878/s`; not `req/s` alone nor `1/2`.
fn rate_at(chars: &[char], start: usize) -> Option<usize> {
    const UNITS: &[&str] = &[
        "msg",
        "msgs",
        "message",
        "messages",
        "row",
        "rows",
        "req",
        "reqs",
        "request",
        "requests",
        "write",
        "writes",
        "delivery",
        "deliveries",
        "delivered",
        "job",
        "jobs",
        "op",
        "ops",
    ];
    let mut end = number_at(chars, start)?;
    if matches!(chars.get(end), Some('k' | 'K' | 'M')) {
        end += 1;
    }
    let word = skip_spaces(chars, end);
    let unit = word_at(chars, word);
    let slash = if unit.is_empty() {
        end
    } else if UNITS.contains(&unit.as_str()) {
        skip_spaces(chars, word + unit.chars().count())
    } else {
        return None;
    };
    if chars.get(slash) != Some(&'/') {
        return None;
    }
    let per = word_at(chars, slash + 1);
    matches!(per.as_str(), "s" | "sec" | "second").then_some(slash + 1 + per.len())
}

/// `p99 14.3 ms`, `p50: 1.2`.
fn percentile_at(chars: &[char], start: usize) -> Option<usize> {
    if chars[start] != 'p'
        || start
            .checked_sub(1)
            .is_some_and(|p| chars[p].is_alphanumeric() || chars[p] == '_')
    {
        return None;
    }
    let digits: String = chars[start + 1..]
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    if !matches!(digits.as_str(), "50" | "90" | "95" | "99" | "999") {
        return None;
    }
    let mut i = start + 1 + digits.len();
    if matches!(chars.get(i), Some(':' | '=')) {
        i += 1;
    }
    let i = skip_spaces(chars, i);
    chars
        .get(i)
        .is_some_and(char::is_ascii_digit)
        .then_some(i + 1)
}

/// `4,915 buffers` (what `EXPLAIN (BUFFERS)` or `auto_explain` reported),
/// `3% more`, `12 % slower` (a run's gain or loss); not `1 % of the live
/// rows`.
fn measure_at(chars: &[char], start: usize) -> Option<usize> {
    const BY: &[&str] = &[
        "more", "less", "fewer", "faster", "slower", "better", "worse",
    ];
    let end = number_at(chars, start)?;
    let next = skip_spaces(chars, end);
    let word = word_at(chars, next);
    if word == "buffers" {
        return Some(next + word.len());
    }
    if chars.get(next) != Some(&'%') {
        return None;
    }
    let after = skip_spaces(chars, next + 1);
    let word = word_at(chars, after);
    BY.contains(&word.as_str()).then_some(after + word.len())
}

/// `2026-11-27` outside backticks, not a timestamp's date.
fn date_at(chars: &[char], start: usize) -> Option<usize> {
    let shape = "20dd-dd-dd";
    if start
        .checked_sub(1)
        .is_some_and(|p| chars[p].is_alphanumeric())
    {
        return None;
    }
    for (k, want) in shape.chars().enumerate() {
        let got = *chars.get(start + k)?;
        let ok = match want {
            'd' => got.is_ascii_digit(),
            other => got == other,
        };
        if !ok {
            return None;
        }
    }
    let end = start + shape.len();
    if chars.get(end).is_some_and(|c| c.is_alphanumeric()) {
        return None;
    }
    let ticks = chars[..start].iter().filter(|c| **c == '`').count();
    (ticks % 2 == 0).then_some(end)
}

/// The figures `comment` quotes, as written.
fn figures(comment: &str) -> Vec<String> {
    let chars: Vec<char> = comment.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let hit = ratio_at(&chars, i)
            .or_else(|| rate_at(&chars, i))
            .or_else(|| percentile_at(&chars, i))
            .or_else(|| measure_at(&chars, i))
            .or_else(|| date_at(&chars, i));
        match hit {
            Some(end) => {
                found.push(chars[i..end].iter().collect());
                i = end;
            }
            None => i += 1,
        }
    }
    found
}

#[test]
fn no_comment_in_src_quotes_a_benchmark_figure() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for name in CRATES {
        source_files(&root.join(name).join("src"), &mut files);
    }
    files.sort();
    let mut comments = 0;
    let mut quoted = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let lines = if file.extension().is_some_and(|e| e == "sql") {
            sql_comments(&text)
        } else {
            rust_comments(&text)
        };
        comments += lines.len();
        for (line, comment) in lines {
            let found = figures(&comment);
            if !found.is_empty() {
                let path = file.strip_prefix(root).unwrap().display();
                quoted.push(format!(
                    "  {path}:{line}: {found:?}\n    {}",
                    comment.trim()
                ));
            }
        }
    }
    assert!(
        files.len() >= 200 && comments >= 5_000,
        "only {} files and {comments} comment lines read: are the crates still there?",
        files.len()
    );
    assert!(
        quoted.is_empty(),
        "comments in src quote benchmark figures, dates or results; say what and why, \
         name the bench (`cargo bench -p … --bench …`) and leave its figures to \
         docs/benchmarks.md:\n{}",
        quoted.join("\n")
    );
}

#[test]
fn figures_are_found_and_code_is_left_alone() {
    for figure in [
        "0.67-0.71x of min(plain drain, JetStream alone)",
        "1.3–1.6× the messages per second",
        "(a) 0.41x of the floor",
        "cold p99 1.62–1.66× of the run",
        "78,289–85,280 messages/s",
        "25-36k msg/s",
        "1,878 delivered/s",
        "pinned 150 s: 1,756/s",
        "p99 14.3 ms",
        "p50: 3 ms",
        "(4,915 buffers for a 10-row shard)",
        "3% more messages per second",
        "measured on 2026-11-27",
        "(2026-11-21)",
    ] {
        assert!(!figures(figure).is_empty(), "not found in {figure:?}");
    }
    for code in [
        "An address is kept as `block × 65536 + offset`",
        "((scope mod 1024) × 37) mod 1024",
        "ids are sequence × 64 + region code",
        "64 × 1024 rows",
        "format!(\"{:08x}\", n) and 0x1f",
        "a 2x2 grid, u8x4",
        "Default: 100 ms.",
        "a threshold of 1,000 dead tuples plus 1 % of the live rows",
        "50 public writes a second per client",
        "req/s at 8 clients",
        "`scheduled_for` defaults to `2016-08-01`",
        "fixed-width UTC text (`2026-11-21T19:27:37.123456+00:00`)",
        "m20261126_000015_outbox_partition_ring",
        "p99 of the cold shards",
        "20 % of the live rows (plus 50)",
        "raise shared_buffers; the reply buffers first",
        "1/2 of them",
    ] {
        assert_eq!(figures(code), Vec::<String>::new(), "in {code:?}");
    }
}

#[test]
fn comments_are_read_apart_from_strings_and_doctests() {
    let rust = "let s = \"0.5x // 1,000 msgs/s\"; // 0.6x\n\
                let r = r#\"p99 3 ms\"#; let c = '\"'; let q = '\\''; let t = \"// 0.1x\";\n\
                fn f<'a>(x: &'a str) {}\n\
                /// ```\n/// let x = \"2026-01-01\"; // 0.9x\n/// ```\n\
                /* 2026-11-27\n 12 rows/s */";
    let found: Vec<(usize, Vec<String>)> = rust_comments(rust)
        .into_iter()
        .map(|(line, text)| (line, figures(&text)))
        .filter(|(_, found)| !found.is_empty())
        .collect();
    assert_eq!(
        found,
        vec![
            (1, vec!["0.6x".to_owned()]),
            (7, vec!["2026-11-27".to_owned()]),
            (8, vec!["12 rows/s".to_owned()]),
        ]
    );
    let sql = "SELECT '-- 0.5x' AS a -- 0.7x\n/* 3 rows/s\n*/ SELECT 1;";
    let found: Vec<(usize, Vec<String>)> = sql_comments(sql)
        .into_iter()
        .map(|(line, text)| (line, figures(&text)))
        .filter(|(_, found)| !found.is_empty())
        .collect();
    assert_eq!(
        found,
        vec![
            (1, vec!["0.7x".to_owned()]),
            (2, vec!["3 rows/s".to_owned()]),
        ]
    );
}
