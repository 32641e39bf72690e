//! What both backends decode and encode the same way: shard keys, rows,
//! backoff states, id lists, driver errors.

use std::time::Duration;

use sea_orm::{DbBackend, DbErr, QueryResult, RuntimeErr, TryGetable};

use outbox_core::store::{ClaimedShard, CommitBatch, CommitOutcome, ShardCommit, StoredRow};
use outbox_core::{
    DeadLetterRow, FailingShard, FencingToken, OutboxKind, ShardKey, ShardState, StoreError,
    TraceParent,
};

use crate::time;
use outbox_core::uuid::Uuid;

/// Longest error text kept in a shard's state (characters beyond are cut).
const MAX_ERROR_LEN: usize = 2000;

/// Wraps driver errors of `operation`.
pub(super) fn op(operation: &'static str) -> impl Fn(DbErr) -> StoreError + Copy {
    move |error| StoreError::database(operation, error)
}

/// Reads a column.
pub(super) fn get<T: TryGetable>(
    row: &QueryResult,
    column: &str,
    operation: &'static str,
) -> Result<T, StoreError> {
    // By name without the `pre` prefix: `try_get` formats a string per call.
    row.try_get_by(column).map_err(op(operation))
}

/// The SQLSTATE of a database error, if the driver gave one.
pub(crate) fn sqlstate(error: &DbErr) -> Option<String> {
    match error {
        DbErr::Exec(RuntimeErr::SqlxError(error)) | DbErr::Query(RuntimeErr::SqlxError(error)) => {
            error
                .as_database_error()
                .and_then(|error| error.code())
                .map(|code| code.into_owned())
        }
        _ => None,
    }
}

/// Whether PostgreSQL chose this statement as a deadlock's victim (SQLSTATE
/// `40P01`): nothing it did stays, and it may simply be run again later.
pub(super) fn is_deadlock(error: &DbErr) -> bool {
    sqlstate(error).as_deref() == Some("40P01")
}

/// A `LIMIT` value.
pub(super) fn limit(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// The stored region of a shard: its target region, or empty.
pub(super) fn region(shard: &ShardKey) -> String {
    shard.region_name().unwrap_or("").to_owned()
}

/// The shard key of a result row (`region_name`, `shard_scope`,
/// `shard_identifier`).
pub(super) fn shard(row: &QueryResult, kind: OutboxKind) -> Result<ShardKey, StoreError> {
    const OP: &str = "read a shard key";
    let region: String = get(row, "region_name", OP)?;
    let scope: i32 = get(row, "shard_scope", OP)?;
    let identifier: i64 = get(row, "shard_identifier", OP)?;
    Ok(ShardKey::from_raw(kind, scope, identifier, Some(region)))
}

/// A PostgreSQL payload column (`jsonb`) as its JSON text: read through
/// `sqlx::types::Json`, checked to be JSON but not parsed into a `Value`
/// (see [`outbox_core::Payload`]).
#[derive(serde::Deserialize)]
#[serde(transparent)]
pub(super) struct StoredPayload(Box<serde_json::value::RawValue>);

impl sea_orm::TryGetableFromJson for StoredPayload {}

/// A row's payload column. PostgreSQL's `jsonb` holds JSON only; SQLite's
/// `json` column is text and may hold anything a hand wrote, which is kept
/// as it is ([`outbox_core::Payload::from_stored`]): its receiver fails on
/// it, its shard alone backs off, and no claim fails on it.
pub(super) fn payload(
    row: &QueryResult,
    backend: DbBackend,
    column: impl sea_orm::ColIdx,
    operation: &'static str,
) -> Result<Option<outbox_core::Payload>, StoreError> {
    match backend {
        DbBackend::Sqlite => row
            .try_get_by::<Option<String>, _>(column)
            .map(|stored| stored.map(outbox_core::Payload::from_stored)),
        _ => row
            .try_get_by::<Option<StoredPayload>, _>(column)
            .map(|stored| stored.map(|stored| stored.0.into())),
    }
    .map_err(op(operation))
}

/// The outbox row of a result row; `None` when its `id` is null (a shard
/// returned without rows).
pub(super) fn stored_row(
    row: &QueryResult,
    backend: DbBackend,
    shard: &ShardKey,
) -> Result<Option<StoredRow>, StoreError> {
    const OP: &str = "read outbox rows";
    let Some(id) = get::<Option<i64>>(row, "id", OP)? else {
        return Ok(None);
    };
    let date_added = time::get(row, backend, "date_added")?;
    let message_id = message_id(row, backend)?
        .unwrap_or_else(|| outbox_core::message::derived_message_id(shard.kind(), id, date_added));
    Ok(Some(StoredRow {
        id,
        message_id,
        shard: shard.clone(),
        category: get(row, "category", OP)?,
        object_identifier: get(row, "object_identifier", OP)?,
        payload: payload(row, backend, "payload", OP)?,
        scheduled_from: time::get(row, backend, "scheduled_from")?,
        scheduled_for: time::get(row, backend, "scheduled_for")?,
        date_added,
        traceparent: traceparent(get(row, "traceparent", OP)?),
        payload_version: payload_version(row, backend)?,
    }))
}

/// The stored `payload_version` (an `integer`: `int4` on PostgreSQL; on
/// SQLite whatever was stored, as SQLite keeps a value of another type in
/// an integer column). NULL is `None`, an untyped write. A value no writer
/// stores (negative, above `u32::MAX`, or on SQLite not an integer at all:
/// written by hand, or by something else) is read as `u32::MAX`, a
/// version no receiver knows: a typed receiver parks the shard rather than
/// decode the payload as a version it does know, and no claim fails on
/// it.
fn payload_version(row: &QueryResult, backend: DbBackend) -> Result<Option<u32>, StoreError> {
    const OP: &str = "read a payload version";
    match backend {
        DbBackend::Sqlite => {
            let Some(sqlite) = row.try_as_sqlite_row() else {
                return Err(StoreError::Malformed {
                    what: OP,
                    detail: "a SQLite row did not come from SQLite".to_owned(),
                });
            };
            match sea_orm::sqlx::Row::try_get::<Option<i64>, _>(sqlite, "payload_version") {
                Ok(stored) => Ok(stored.map(version)),
                Err(sea_orm::sqlx::Error::ColumnDecode { source, .. }) => {
                    tracing::warn!(
                        error = %source,
                        "outbox row's payload_version is not an integer; read as a version \
                         no receiver knows"
                    );
                    Ok(Some(u32::MAX))
                }
                Err(error) => Err(op(OP)(DbErr::Query(RuntimeErr::SqlxError(
                    std::sync::Arc::new(error),
                )))),
            }
        }
        _ => Ok(
            get::<Option<i32>>(row, "payload_version", OP)?.map(|stored| version(stored.into()))
        ),
    }
}

/// A stored payload version as a receiver reads it: one that no writer
/// stores (negative, or above `u32::MAX`) is `u32::MAX`, a version no
/// receiver knows (see [`payload_version`]).
pub(super) fn version(stored: i64) -> u32 {
    u32::try_from(stored).unwrap_or(u32::MAX)
}

/// The stored `message_id`: `uuid` on PostgreSQL, its 16 bytes on SQLite
/// (a hyphenated text written by hand is read too); `None` when null (a row
/// written without one) and, like a `traceparent`, when SQLite's value is
/// not a UUID (written by something else): such a row is delivered all the
/// same, with its derived id, instead of failing the claim of every shard.
fn message_id(row: &QueryResult, backend: DbBackend) -> Result<Option<Uuid>, StoreError> {
    const OP: &str = "read a message id";
    match backend {
        DbBackend::Sqlite => {
            let stored: Option<Vec<u8>> = get(row, "message_id", OP)?;
            Ok(stored.and_then(|bytes| {
                let parsed = Uuid::from_slice(&bytes)
                    .ok()
                    .or_else(|| Uuid::try_parse_ascii(&bytes).ok());
                if parsed.is_none() {
                    tracing::warn!(
                        stored = %String::from_utf8_lossy(&bytes),
                        "outbox row's message_id is not a UUID; its derived id is used"
                    );
                }
                parsed
            }))
        }
        _ => get(row, "message_id", OP),
    }
}

/// The trace context of a stored `traceparent`: a value that does not parse
/// (written by hand, or by something else) is ignored, never an error: the
/// row is delivered all the same, without a parent.
pub(super) fn traceparent(stored: Option<String>) -> Option<TraceParent> {
    let stored = stored?;
    match stored.parse() {
        Ok(parent) => Some(parent),
        Err(error) => {
            tracing::debug!(%error, "outbox row's traceparent ignored");
            None
        }
    }
}

/// The backoff state of a result row; `None` when `attempts` is null.
pub(super) fn state(
    row: &QueryResult,
    backend: DbBackend,
) -> Result<Option<ShardState>, StoreError> {
    const OP: &str = "read a shard's backoff";
    let Some(attempts) = get::<Option<i32>>(row, "attempts", OP)? else {
        return Ok(None);
    };
    let last_backoff_ms: Option<i64> = get(row, "last_backoff_ms", OP)?;
    Ok(Some(ShardState {
        attempts: u32::try_from(attempts).unwrap_or(0),
        last_backoff: last_backoff_ms
            .and_then(|ms| u64::try_from(ms).ok())
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis),
        retry_at: time::get(row, backend, "retry_at")?,
        last_error: get(row, "last_error", OP)?,
        failed_at: time::get(row, backend, "failed_at")?,
    }))
}

/// Groups claimed rows by shard, shards in order of their first row, all
/// leased by one claim with fencing token `fence`.
pub(super) fn group(
    rows: Vec<(ShardKey, Option<StoredRow>, Option<ShardState>)>,
    fence: FencingToken,
) -> Vec<ClaimedShard> {
    let mut shards: Vec<ClaimedShard> = Vec::new();
    let mut index = std::collections::HashMap::new();
    for (shard, row, state) in rows {
        let at = *index.entry(shard.clone()).or_insert_with(|| {
            shards.push(ClaimedShard {
                shard,
                rows: Vec::new(),
                state: state.clone(),
                fence,
            });
            shards.len() - 1
        });
        if let Some(row) = row {
            shards[at].rows.push(row);
        }
    }
    shards
}

/// An error text as a shard's state keeps it: [`storable_text`], cut to
/// `MAX_ERROR_LEN` bytes.
pub(super) fn error_text(error: &str) -> String {
    let mut text = storable_text(error);
    if text.len() > MAX_ERROR_LEN {
        let mut cut = MAX_ERROR_LEN;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

/// A receiver's error text as both backends can store it: a NUL character,
/// which PostgreSQL's `text` refuses (and which would fail the commit of
/// every round that tries to record it), becomes U+FFFD; the same on
/// SQLite, so both keep the same text.
pub(super) fn storable_text(error: &str) -> String {
    error.replace('\0', "\u{fffd}")
}

/// Milliseconds of a delay, as stored.
pub(super) fn millis(delay: Duration) -> i64 {
    i64::try_from(delay.as_millis()).unwrap_or(i64::MAX)
}

/// The buckets of `shards`, sorted and without duplicates.
pub(super) fn buckets<'a>(shards: impl IntoIterator<Item = &'a ShardKey>) -> Vec<i32> {
    let mut buckets: Vec<i32> = shards.into_iter().map(ShardKey::bucket).collect();
    buckets.sort_unstable();
    buckets.dedup();
    buckets
}

/// Every bucket a commit touches: those of its shards and of its shards
/// still in flight (sorted, without duplicates).
pub(super) fn batch_buckets(batch: &CommitBatch) -> Vec<i32> {
    buckets(
        batch
            .shards
            .iter()
            .map(|shard| &shard.shard)
            .chain(&batch.in_flight),
    )
}

/// Shards of `shards` whose bucket is not in `owned` (sorted).
pub(super) fn lost<'a>(
    shards: impl IntoIterator<Item = &'a ShardKey>,
    owned: &[i32],
) -> Vec<ShardKey> {
    shards
        .into_iter()
        .filter(|shard| owned.binary_search(&shard.bucket()).is_err())
        .cloned()
        .collect()
}

/// The fence of a commit in a transaction (`fence.sql` on either store): its
/// rows are the buckets the round still owns. Returns the batch's shards
/// whose buckets it kept, and the outcome so far (the shards it lost).
pub(super) fn fenced<'b>(
    batch: &'b CommitBatch,
    rows: &[QueryResult],
    operation: &'static str,
) -> Result<(Vec<&'b ShardCommit>, CommitOutcome), StoreError> {
    let mut owned = rows
        .iter()
        .map(|row| get::<i32>(row, "bucket", operation))
        .collect::<Result<Vec<_>, _>>()?;
    owned.sort_unstable();
    let lost = lost(batch.shards.iter().map(|s| &s.shard), &owned);
    let kept = batch
        .shards
        .iter()
        .filter(|shard| !lost.contains(&shard.shard))
        .collect();
    Ok((
        kept,
        CommitOutcome {
            lost,
            ..CommitOutcome::default()
        },
    ))
}

/// Decodes `failing_shards.sql` rows.
pub(super) fn failing_shards(
    rows: &[QueryResult],
    kind: OutboxKind,
    backend: DbBackend,
) -> Result<Vec<FailingShard>, StoreError> {
    rows.iter()
        .filter_map(|row| {
            let shard = match shard(row, kind) {
                Ok(shard) => shard,
                Err(error) => return Some(Err(error)),
            };
            state(row, backend)
                .transpose()
                .map(|state| state.map(|state| FailingShard { shard, state }))
        })
        .collect()
}

/// Decodes `dead_letters.sql` rows.
pub(super) fn dead_letter_rows(
    rows: &[QueryResult],
    kind: OutboxKind,
    backend: DbBackend,
) -> Result<Vec<DeadLetterRow>, StoreError> {
    const OP: &str = "list dead letters";
    rows.iter()
        .map(|row| {
            let shard = shard(row, kind)?;
            let stored = stored_row(row, backend, &shard)?.ok_or(StoreError::Malformed {
                what: "dead letter",
                detail: "a dead letter without id".to_owned(),
            })?;
            Ok(DeadLetterRow {
                row: stored,
                error: get(row, "error", OP)?,
                dead_lettered_at: time::get(row, backend, "dead_lettered_at")?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::shard::CLAIM_BUCKETS;

    #[test]
    fn the_bucket_count_is_the_one_the_sql_hashes_into() {
        // Every statement computes `(... % 1024 ...)`: the literal and the
        // core's constant must not drift apart.
        assert_eq!(CLAIM_BUCKETS, 1024);
        for sql in [
            include_str!("postgres/sql/outbox/claim_due_oldest.sql"),
            include_str!("postgres/sql/outbox/claim_due_newest.sql"),
            include_str!("postgres/sql/outbox/claim_before_commit.sql"),
            include_str!("postgres/sql/outbox/commit_finished.sql"),
            include_str!("postgres/sql/outbox/complete.sql"),
            include_str!("postgres/sql/outbox/has_due.sql"),
            include_str!("sqlite/sql/outbox/has_due.sql"),
            include_str!("sqlite/sql/outbox/candidates.sql"),
        ] {
            assert!(sql.contains("% 1024"), "{sql}");
            assert!(!sql.contains("% 1023") && !sql.contains("% 2048"));
        }
    }

    #[test]
    fn a_stored_traceparent_that_does_not_parse_is_ignored() {
        let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            traceparent(Some(valid.to_owned())).map(|p| p.to_string()),
            Some(valid.to_owned())
        );
        assert_eq!(traceparent(None), None);
        for hostile in ["", "garbage", "00-zz", &"0".repeat(10_000), "00-\0-'; DROP"] {
            assert_eq!(traceparent(Some(hostile.to_owned())), None, "{hostile:?}");
        }
    }

    #[test]
    fn long_errors_are_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_ERROR_LEN);
        let cut = error_text(&long);
        assert!(cut.len() <= MAX_ERROR_LEN);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(error_text("short"), "short");
    }

    #[test]
    fn a_nul_in_an_error_becomes_a_replacement_character() {
        assert_eq!(error_text("bad\0thing"), "bad\u{fffd}thing");
        assert_eq!(storable_text("\0\0"), "\u{fffd}\u{fffd}");
        let long = format!("{}\0", "x".repeat(MAX_ERROR_LEN));
        assert!(!error_text(&long).contains('\0'));
    }
}
