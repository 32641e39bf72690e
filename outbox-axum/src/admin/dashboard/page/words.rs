//! The page's own words: spans of time, and a table's name in its links.
//! What it names as the audit log does (scopes, categories, targets) is in
//! `admin/labels.rs`.

use chrono::{DateTime, Utc};

use outbox_core::OutboxKind;

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
