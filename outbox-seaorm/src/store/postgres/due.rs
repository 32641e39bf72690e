//! Decoding a background claim's rows (`claim_due_oldest.sql`,
//! `claim_due_newest.sql`) as they arrive.
//!
//! Every result row carries its shard's key, backoff state and one of its
//! rows, and its place in the window (NULL: the row's own id). The claim's
//! own figures come once, on a row without a shard: the window's counts,
//! the watermark's marks and the fencing token of every shard leased
//! (NULL when none was); other rows without a shard carry a leased bucket
//! and where its row is now (`addresses.rs`). Rows come in no promised
//! order: rows of one shard may come in several runs (the oldest-end claim
//! returns its window rows, then the deep shards' rows beyond), and the
//! claim's figures before or after them. Columns are read by position
//! (the order of the statements' `SELECT`, named below), not by name: a
//! claim returns thousands of rows, and a lookup by name per column and
//! row costs more than the rest of the decoding. The key and the state are
//! read once per run of a shard's rows.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use std::sync::Arc;

use sea_orm::sqlx;
use sea_orm::{DbErr, QueryResult, RuntimeErr};

use outbox_core::store::{ClaimedShard, DueClaim, StoredRow};
use outbox_core::uuid::Uuid;
use outbox_core::{FencingToken, OutboxKind, ShardKey, ShardState, StoreError};

use super::watermark::Marks;
use crate::store::codec;

/// The columns of the claims' results, by position.
mod column {
    pub(super) const FIRST: usize = 0;
    pub(super) const WINDOW_ROWS: usize = 1;
    pub(super) const SCANNED_ROWS: usize = 2;
    pub(super) const ID: usize = 3;
    pub(super) const REGION_NAME: usize = 4;
    pub(super) const SHARD_SCOPE: usize = 5;
    pub(super) const SHARD_IDENTIFIER: usize = 6;
    pub(super) const CATEGORY: usize = 7;
    pub(super) const OBJECT_IDENTIFIER: usize = 8;
    pub(super) const PAYLOAD: usize = 9;
    pub(super) const SCHEDULED_FROM: usize = 10;
    pub(super) const SCHEDULED_FOR: usize = 11;
    pub(super) const DATE_ADDED: usize = 12;
    pub(super) const TRACEPARENT: usize = 13;
    pub(super) const MESSAGE_ID: usize = 14;
    pub(super) const PAYLOAD_VERSION: usize = 15;
    pub(super) const ATTEMPTS: usize = 16;
    pub(super) const LAST_BACKOFF_MS: usize = 17;
    pub(super) const RETRY_AT: usize = 18;
    pub(super) const LAST_ERROR: usize = 19;
    pub(super) const FAILED_AT: usize = 20;
    pub(super) const FENCE: usize = 21;
    pub(super) const HEAD: usize = 22;
    pub(super) const SNAPSHOT_XMIN: usize = 23;
    pub(super) const SNAPSHOT_XMAX: usize = 24;
    pub(super) const SCANNED_ALL: usize = 25;
    pub(super) const LEASED_BUCKET: usize = 26;
    pub(super) const LEASED_AT: usize = 27;
}

const OP: &str = "claim due shards";

/// Reads column `index` straight from the driver's row: SeaORM's reader
/// formats an error text for every NULL it then reads as `None` (the
/// leased bucket, the trace context and the payload version are NULL on
/// most rows of a claim).
fn at<T>(row: &QueryResult, index: usize) -> Result<T, StoreError>
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    match row.try_as_pg_row() {
        Some(pg) => sqlx::Row::try_get(pg, index)
            .map_err(|error| codec::op(OP)(DbErr::Query(RuntimeErr::SqlxError(Arc::new(error))))),
        None => Err(StoreError::Malformed {
            what: OP,
            detail: "a PostgreSQL claim's row did not come from PostgreSQL".to_owned(),
        }),
    }
}

/// Builds a [`DueClaim`] from its rows, one at a time.
pub(super) struct Decoder {
    kind: OutboxKind,
    claim: DueClaim,
    /// Each shard's place in the window.
    firsts: Vec<i64>,
    /// Where each shard is in `claim.shards`.
    index: HashMap<ShardKey, usize>,
    /// The shard of the last row.
    current: Option<usize>,
    /// What the statement tells the watermark (its figures' row).
    marks: Option<Marks>,
    /// The fencing token of every shard leased (its figures' row).
    fence: Option<FencingToken>,
    /// The highest row id returned.
    max_id: Option<i64>,
    /// Each leased bucket and where its row is now (`addresses.rs`).
    leased: Vec<(i32, i64)>,
}

impl Decoder {
    pub(super) fn new(kind: OutboxKind) -> Self {
        Self {
            kind,
            claim: DueClaim::default(),
            firsts: Vec::new(),
            index: HashMap::new(),
            current: None,
            marks: None,
            fence: None,
            max_id: None,
            leased: Vec::new(),
        }
    }

    pub(super) fn push(&mut self, row: &QueryResult) -> Result<(), StoreError> {
        if let Some(bucket) = at::<Option<i32>>(row, column::LEASED_BUCKET)? {
            // A leased bucket's address, on a row of its own.
            // A `tid`'s text, read in place.
            let address = match row.try_as_pg_row() {
                Some(pg) => sqlx::Row::try_get::<Option<&str>, _>(pg, column::LEASED_AT)
                    .ok()
                    .flatten()
                    .map_or(0, super::addresses::parse),
                None => 0,
            };
            self.leased.push((bucket, address));
            return Ok(());
        }
        let Some(scope) = at::<Option<i32>>(row, column::SHARD_SCOPE)? else {
            return self.figures(row);
        };
        let identifier: i64 = at(row, column::SHARD_IDENTIFIER)?;
        let region = match self.kind {
            OutboxKind::Region => None,
            OutboxKind::Control => Some(at::<String>(row, column::REGION_NAME)?),
        };
        let same_shard = self.current.is_some_and(|at| {
            let shard = &self.claim.shards[at].shard;
            shard.scope() == scope
                && shard.identifier() == identifier
                && shard.region_name() == region.as_deref()
        });
        if !same_shard {
            let shard = ShardKey::from_raw(self.kind, scope, identifier, region);
            // NULL on a window row returned as read: the row's own id.
            let first: i64 = match at::<Option<i64>>(row, column::FIRST)? {
                Some(first) => first,
                None => at(row, column::ID)?,
            };
            let at = match self.index.get(&shard) {
                Some(&at) => {
                    self.firsts[at] = self.firsts[at].min(first);
                    at
                }
                None => {
                    self.index.insert(shard.clone(), self.claim.shards.len());
                    self.firsts.push(first);
                    self.claim.shards.push(ClaimedShard {
                        shard,
                        rows: Vec::new(),
                        state: state(row)?,
                        // The claim's, set by `finish`.
                        fence: FencingToken::new(0),
                    });
                    self.claim.shards.len() - 1
                }
            };
            self.current = Some(at);
        }
        if let Some(at) = self.current {
            let shard = &mut self.claim.shards[at];
            if let Some(stored) = stored_row(row, &shard.shard)? {
                self.max_id = Some(self.max_id.map_or(stored.id, |max| max.max(stored.id)));
                shard.rows.push(stored);
            }
        }
        Ok(())
    }

    /// The claim's own figures: the window's and the scan's rows, the
    /// watermark's marks (the newest-end claim has none) and the fencing
    /// token. A row with neither a shard nor figures is skipped.
    fn figures(&mut self, row: &QueryResult) -> Result<(), StoreError> {
        let Some(window) = at::<Option<i64>>(row, column::WINDOW_ROWS)? else {
            return Ok(());
        };
        let count = |count: i64| usize::try_from(count).unwrap_or(0);
        self.claim.window = count(window);
        self.claim.scanned = count(at(row, column::SCANNED_ROWS)?);
        self.marks = Some(Marks {
            head: at(row, column::HEAD)?,
            xmin: at(row, column::SNAPSHOT_XMIN)?,
            xmax: at(row, column::SNAPSHOT_XMAX)?,
            scanned_all: at::<Option<bool>>(row, column::SCANNED_ALL)?.unwrap_or(false),
        });
        self.fence = at::<Option<i64>>(row, column::FENCE)?.map(FencingToken::new);
        Ok(())
    }

    /// What the watermark learns: the statement's marks and the highest id
    /// returned.
    pub(super) fn marks(&self) -> (Marks, Option<i64>) {
        (self.marks.unwrap_or_default(), self.max_id)
    }

    /// Each bucket the claim leased, and where its row is now.
    pub(super) fn leased(&self) -> &[(i32, i64)] {
        &self.leased
    }

    /// The claim: shards in window order, each one's rows in id order, each
    /// with the claim's fencing token.
    ///
    /// # Errors
    ///
    /// [`StoreError::Malformed`] when shards were leased and the statement
    /// gave no fencing token.
    pub(super) fn finish(self) -> Result<DueClaim, StoreError> {
        let Self {
            mut claim,
            firsts,
            fence,
            ..
        } = self;
        let fence = match (fence, claim.shards.is_empty()) {
            (Some(fence), _) => fence,
            (None, true) => FencingToken::new(0),
            (None, false) => {
                return Err(StoreError::Malformed {
                    what: OP,
                    detail: "shards were leased without a fencing token".to_owned(),
                })
            }
        };
        let mut shards: Vec<(i64, ClaimedShard)> = firsts.into_iter().zip(claim.shards).collect();
        shards.sort_by_key(|(first, _)| *first);
        claim.shards = shards
            .into_iter()
            .map(|(_, mut shard)| {
                shard.fence = fence;
                if !shard.rows.is_sorted_by_key(|row| row.id) {
                    shard.rows.sort_by_key(|row| row.id);
                }
                shard
            })
            .collect();
        Ok(claim)
    }
}

/// The outbox row of a result row; `None` for a shard returned without
/// rows (it backs off).
fn stored_row(row: &QueryResult, shard: &ShardKey) -> Result<Option<StoredRow>, StoreError> {
    let Some(id) = at::<Option<i64>>(row, column::ID)? else {
        return Ok(None);
    };
    let date_added: DateTime<Utc> = at(row, column::DATE_ADDED)?;
    let message_id = at::<Option<Uuid>>(row, column::MESSAGE_ID)?
        .unwrap_or_else(|| outbox_core::message::derived_message_id(shard.kind(), id, date_added));
    Ok(Some(StoredRow {
        id,
        message_id,
        shard: shard.clone(),
        category: at(row, column::CATEGORY)?,
        object_identifier: at(row, column::OBJECT_IDENTIFIER)?,
        payload: at::<Option<sqlx::types::Json<Box<serde_json::value::RawValue>>>>(
            row,
            column::PAYLOAD,
        )?
        .map(|json| json.0.into()),
        scheduled_from: at(row, column::SCHEDULED_FROM)?,
        scheduled_for: at(row, column::SCHEDULED_FOR)?,
        date_added,
        traceparent: codec::traceparent(at(row, column::TRACEPARENT)?),
        // `int4`: a negative one is read as a version no receiver knows
        // (see `codec::version`).
        payload_version: at::<Option<i32>>(row, column::PAYLOAD_VERSION)?
            .map(|stored| codec::version(stored.into())),
    }))
}

/// The shard's backoff state; `None` when it has none.
fn state(row: &QueryResult) -> Result<Option<ShardState>, StoreError> {
    let Some(attempts) = at::<Option<i32>>(row, column::ATTEMPTS)? else {
        return Ok(None);
    };
    let last_backoff_ms: Option<i64> = at(row, column::LAST_BACKOFF_MS)?;
    Ok(Some(ShardState {
        attempts: u32::try_from(attempts).unwrap_or(0),
        last_backoff: last_backoff_ms
            .and_then(|ms| u64::try_from(ms).ok())
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis),
        retry_at: at(row, column::RETRY_AT)?,
        last_error: at(row, column::LAST_ERROR)?,
        failed_at: at(row, column::FAILED_AT)?,
    }))
}
