//! Timestamps as each backend stores them.
//!
//! PostgreSQL stores `timestamptz`. SQLite stores text, compared as text by the
//! drain queries, so every timestamp is written in one fixed-width UTC form
//! (`2026-11-21T19:27:37.123456+00:00`); sqlx's own encoding drops trailing
//! zero digits, which would break that ordering.

use chrono::{DateTime, Utc};
use sea_orm::{DbBackend, QueryResult, Value};

use outbox_core::StoreError;

/// A timestamp as a bind value for `backend`.
pub(crate) fn bind(backend: DbBackend, at: DateTime<Utc>) -> Value {
    match backend {
        DbBackend::Sqlite => Value::from(sqlite_text(at)),
        _ => Value::from(at),
    }
}

/// The fixed-width text form used on SQLite.
pub(crate) fn sqlite_text(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.6f+00:00").to_string()
}

/// Reads a timestamp column.
pub(crate) fn get(
    row: &QueryResult,
    backend: DbBackend,
    column: &'static str,
) -> Result<DateTime<Utc>, StoreError> {
    match backend {
        DbBackend::Sqlite => {
            let text: String = row
                .try_get_by(column)
                .map_err(|e| StoreError::database("read a timestamp", e))?;
            parse_sqlite(&text, column)
        }
        _ => row
            .try_get_by(column)
            .map_err(|e| StoreError::database("read a timestamp", e)),
    }
}

/// Reads a nullable timestamp column (an aggregate over no rows).
pub(crate) fn get_opt(
    row: &QueryResult,
    backend: DbBackend,
    column: &'static str,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    match backend {
        DbBackend::Sqlite => {
            let text: Option<String> = row
                .try_get_by(column)
                .map_err(|e| StoreError::database("read a timestamp", e))?;
            text.map(|text| parse_sqlite(&text, column)).transpose()
        }
        _ => row
            .try_get_by(column)
            .map_err(|e| StoreError::database("read a timestamp", e)),
    }
}

fn parse_sqlite(text: &str, column: &'static str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(text)
        .or_else(|_| DateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f%:z"))
        .map(|at| at.with_timezone(&Utc))
        .map_err(|e| StoreError::Malformed {
            what: column,
            detail: format!("{text:?} is not an RFC 3339 timestamp: {e}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn sqlite_text_is_fixed_width_and_sorts_like_time() {
        let whole = Utc.with_ymd_and_hms(2026, 11, 21, 19, 27, 37).unwrap();
        let later = whole + chrono::Duration::microseconds(500_000);
        assert_eq!(sqlite_text(whole), "2026-11-21T19:27:37.000000+00:00");
        assert!(sqlite_text(whole) < sqlite_text(later));
        assert_eq!(parse_sqlite(&sqlite_text(later), "t").unwrap(), later);
    }
}
