//! The statements on the outbox tables: each written once, in
//! `sql/outbox/`, and rendered for each table by substituting a few named
//! parts, once per process.
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
//!   equals the parameters (region, scope, identifier), the region table's
//!   statement leaving the region's out.
//! - `{region:a or X}`: the region of `a`'s shard, where a statement needs
//!   one (the drain's own tables key every shard by a region): `X`, the
//!   region table's stand-in written at the site (`''` as those tables store
//!   it, `NULL::text` in a claim's rows) | `a.region_name`;
//!   `{region or X}` unqualified.
//! - `{include:name}`: the fragment `sql/outbox/include/name.sql`, without
//!   its opening `--` lines (they say what it is and where it goes), its
//!   parts rendered in turn: a block that several statements share. Where
//!   the tables' statements are shaped differently, the fragment has one
//!   file per table, `name.region.sql` | `name.control.sql`: only the
//!   backlog's walk over the scopes, a loose scan of each table's own
//!   index.

use outbox_core::OutboxKind;

/// `source` rendered for the outbox table of `kind`.
///
/// # Panics
///
/// On a part not described in the module docs: the sources are constants,
/// every one of them rendered by the tests.
pub(super) fn render(source: &str, kind: OutboxKind) -> String {
    let mut out = String::with_capacity(source.len() + source.len() / 8);
    let mut rest = source;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            panic!("an unclosed part in {source}");
        };
        part(&rest[open + 1..open + close], kind, &mut out);
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

/// Appends `part` (what is between the braces) rendered for `kind`.
fn part(part: &str, kind: OutboxKind, out: &mut String) {
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
            if control {
                out.push_str(&format!("{a}.region_name = {region} AND "));
            }
            out.push_str(&format!(
                "{a}.shard_scope = {scope} AND {a}.shard_identifier = {identifier}"
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
            let fragment = fragment(argument, kind);
            let body = fragment
                .split_inclusive('\n')
                .skip_while(|line| line.starts_with("--"))
                .collect::<String>();
            out.push_str(render(&body, kind).trim_end());
        }
        _ => panic!("unknown part `{{{part}}}` (see `store::postgres::render`)"),
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
