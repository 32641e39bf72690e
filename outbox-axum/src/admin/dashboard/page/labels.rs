//! The page's words for what it shows: scopes, categories and targets by
//! name and number (the audit log uses the same), and spans of time.

use chrono::{DateTime, Utc};

use outbox_core::{Category, OutboxKind, Scope};

use super::super::super::model::{Kind, TargetRef};

/// A scope by name and number, as the page and the audit log show it:
/// `OrganizationScope (0)`, or `scope 7` for one this binary does not
/// declare.
pub(super) fn scope_label(value: i32, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{name} ({value})"),
        None => format!("scope {value}"),
    }
}

/// A category likewise: `OrganizationUpdate (1)`, or `category 9`.
pub(super) fn category_label(value: i32, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{name} ({value})"),
        None => format!("category {value}"),
    }
}

/// "region-outbox shard OrganizationScope (0) 42" or "region-outbox scope
/// OrganizationScope (0)" (with the region of a control-outbox target).
pub(crate) fn target_label<C: Category>(target: &TargetRef) -> String {
    describe(target, |value| {
        scope_label(
            value,
            C::Scope::try_from(value).ok().map(|scope| scope.name()),
        )
    })
}

pub(super) fn describe(target: &TargetRef, scope_label: impl Fn(i32) -> String) -> String {
    let scope = scope_label(target.scope);
    let region = target
        .region
        .as_ref()
        .map(|region| format!(" → {region}"))
        .unwrap_or_default();
    match target.identifier {
        Some(identifier) => format!(
            "{} shard {scope} {identifier}{region}",
            kind_name(target.kind)
        ),
        None => format!("{} scope {scope}{region}", kind_name(target.kind)),
    }
}

pub(super) fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Region => "region-outbox",
        Kind::Control => "control-outbox",
    }
}

pub(super) fn kind_value(kind: OutboxKind) -> &'static str {
    match kind {
        OutboxKind::Region => "region",
        OutboxKind::Control => "control",
    }
}

/// "3 s", "2 min", "1 h 5 min", "2 d 3 h".
pub(super) fn span(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", s / 60),
        3600..=86_399 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

pub(super) fn ago(now: DateTime<Utc>, then: DateTime<Utc>) -> String {
    format!("{} ago", span((now - then).num_seconds()))
}

pub(super) fn until(now: DateTime<Utc>, then: DateTime<Utc>) -> String {
    let seconds = (then - now).num_seconds();
    if seconds <= 0 {
        "now".to_owned()
    } else if seconds > 365 * 86_400 {
        "never (waits for an operator)".to_owned()
    } else {
        format!("in {}", span(seconds))
    }
}
