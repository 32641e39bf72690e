//! The write API: outbox rows on the caller's connection or transaction.
//!
//! Every function takes any SeaORM [`ConnectionTrait`]. Pass the transaction
//! that changes your model, and the outbox row exists if and only if that
//! transaction commits. Every row written is noted in the current
//! [`OutboxContext`](outbox_core::OutboxContext), if any, so that it can be
//! flushed right after the commit.
//!
//! Each function runs in a span of its own (`outbox.write_region`,
//! `outbox.write_region_many`, `outbox.write_control`,
//! `outbox.write_control_many`; kind `producer`, `messaging.system` `outbox`,
//! `messaging.operation.type` `send`, and `messaging.destination.name` the
//! category for a single message), and every row stores the W3C
//! `traceparent` of that span, when an OpenTelemetry layer sees it: the row's
//! delivery span continues its trace (see `outbox_core::trace`).
//!
//! # Typed categories
//!
//! A category declared with `(payload = T)` in the registry is written with
//! [`OutboxMessage::typed`]: it takes a `T` (the compiler refuses another
//! type) and the row stores the version of `T`'s contract, which the
//! receivers read it by (see `outbox_core::contract`). An untyped message
//! of such a category ([`OutboxMessage::new`]) is refused before any
//! statement runs ([`WriteError::UntypedWrite`]).
//!
//! # One shard's rows commit in id order (rule 11)
//!
//! On PostgreSQL each insert statement first takes a transaction-level lock
//! of every shard it writes (an advisory lock, before any id is drawn): a
//! second transaction writing the same shard waits in its insert until the
//! first one commits or rolls back, so a receiver never gets a shard's row
//! after one with a higher id. Writers of different shards do not wait for
//! each other. The price: one shard's writers commit one at a time from
//! their outbox insert on (write the outbox row last in the transaction,
//! as the replicated models do), and a transaction that writes shard A then
//! shard B in two calls while another writes B then A may deadlock
//! (PostgreSQL ends one with SQLSTATE 40P01; write both in one
//! `write_region_many` call, whose locks are taken in one order). SQLite
//! needs no lock: one transaction writes at a time, holding the write lock
//! to its end.
//!
//! ```no_run
//! # outbox_core::registry! { OrganizationScope = 0 { OrganizationUpdate = 1 } }
//! use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId};
//! use sea_orm::TransactionTrait;
//!
//! # async fn run(db: &sea_orm::DatabaseConnection) -> Result<(), Box<dyn std::error::Error>> {
//! let txn = db.begin().await?;
//! // ... update the organization with `&txn` ...
//! let written = write_region(
//!     &txn,
//!     OutboxMessage::new(OutboxCategory::OrganizationUpdate, ShardId(42), ObjectId(42))
//!         .with_payload(serde_json::json!({ "name": "Acme" })),
//! )
//! .await?;
//! txn.commit().await?;
//! println!("wrote row {} on shard {}", written.id, written.shard);
//! # Ok(()) }
//! ```

use chrono::Utc;
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement, Value};
use serde::Serialize;

use outbox_core::uuid::Uuid;
use outbox_core::{Category, OutboxKind, Scope, ShardKey, TypedCategory};

use crate::time;

mod shard_lock;

/// Rows per insert statement (12–13 columns each, 7–8 of them bound per row,
/// within every backend's parameter limit).
const ROWS_PER_STATEMENT: usize = 1000;

/// The shard identifier of a message within its category's scope (for
/// example the organization id): with the scope, the shard it is delivered in,
/// in order.
///
/// A type of its own so that it cannot be swapped with the [`ObjectId`] in
/// [`OutboxMessage::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardId(pub i64);

/// The object a message is about (for example the product id): messages of
/// one category about one object coalesce, unless the category is declared
/// `(no_coalesce)` in the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId(pub i64);

impl std::fmt::Display for ShardId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::fmt::Display for ObjectId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// One outbox message to write.
///
/// ```
/// # outbox_core::registry! {
/// #     CatalogScope = 0 (shard_field = "shop_id") {
/// #         ProductUpdate = 1,
/// #         PriceChanged = 2 (no_coalesce),
/// #     }
/// # }
/// use outbox_seaorm::{ObjectId, OutboxMessage, ShardId};
///
/// // Product 7 of shop 3: delivered in the shop's shard, in order; only the
/// // newest update of product 7 is delivered when several wait.
/// let update = OutboxMessage::new(OutboxCategory::ProductUpdate, ShardId(3), ObjectId(7));
/// // Declared `(no_coalesce)`: every price change is delivered, however many wait.
/// let change = OutboxMessage::new(OutboxCategory::PriceChanged, ShardId(3), ObjectId(7))
///     .with_payload(serde_json::json!({ "cents": 1299 }));
/// assert_eq!(update.region_shard().identifier(), 3);
/// # let _ = change;
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct OutboxMessage<C> {
    /// What the message means; its scope is the shard scope.
    pub category: C,
    /// The shard identifier within the category's scope (e.g. organization id).
    pub shard_identifier: ShardId,
    /// The object; messages with the same category and object coalesce,
    /// unless the category is declared `(no_coalesce)`.
    pub object_identifier: ObjectId,
    /// What the receiver needs.
    pub payload: Option<serde_json::Value>,
    /// The version of the payload's contract, for a category declared
    /// with `(payload = T)`: set by [`typed`](Self::typed), `None` for an
    /// untyped message (from [`new`](Self::new)). The row stores it, and a
    /// typed receiver reads the payload as that version (a row without
    /// one as version 1; see `outbox_core::contract`).
    pub payload_version: Option<u32>,
}

impl<C: Category> OutboxMessage<C> {
    /// A message without payload: `category` about `object`, delivered in
    /// shard `shard` of the category's scope.
    pub fn new(category: C, shard: ShardId, object: ObjectId) -> Self {
        Self {
            category,
            shard_identifier: shard,
            object_identifier: object,
            payload: None,
            payload_version: None,
        }
    }

    /// A message of a typed category (declared with `(payload = T)` in the
    /// registry): `payload` is the registry's `T`, stored as JSON with its
    /// contract's [`VERSION`](outbox_core::Contract::VERSION), about
    /// `object`, delivered in shard `shard` of the category's scope.
    ///
    /// ```
    /// use outbox_core::Contract;
    /// use outbox_seaorm::{ObjectId, OutboxMessage, ShardId};
    ///
    /// #[derive(serde::Serialize, serde::Deserialize, outbox_core::schemars::JsonSchema)]
    /// #[schemars(crate = "outbox_core::schemars")]
    /// pub struct Rename { pub name: String }
    /// impl Contract for Rename { const VERSION: u32 = 2; }
    ///
    /// outbox_core::registry! { OrgScope = 0 { OrgRenamed = 1 (payload = Rename) } }
    ///
    /// # fn main() -> Result<(), outbox_seaorm::WriteError> {
    /// let message = OutboxMessage::typed(
    ///     outbox_categories::OrgRenamed,
    ///     ShardId(42),
    ///     ObjectId(42),
    ///     &Rename { name: "Acme".into() },
    /// )?;
    /// assert_eq!(message.category, OutboxCategory::OrgRenamed);
    /// assert_eq!(message.payload_version, Some(2));
    /// assert_eq!(message.payload, Some(serde_json::json!({ "name": "Acme" })));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`WriteError::Payload`] when `payload` does not serialize to JSON.
    pub fn typed<K: TypedCategory<Category = C>>(
        category: K,
        shard: ShardId,
        object: ObjectId,
        payload: &K::Payload,
    ) -> Result<Self, WriteError> {
        let (payload, version) =
            outbox_core::contract::encode(category, payload).map_err(|source| {
                WriteError::Payload {
                    category: K::CATEGORY.name(),
                    source,
                }
            })?;
        Ok(Self {
            payload: Some(payload),
            payload_version: Some(version),
            ..Self::new(K::CATEGORY, shard, object)
        })
    }

    /// Sets the payload, untyped: a version set by [`typed`](Self::typed)
    /// is cleared, so that a typed category's payload is only ever written
    /// through it.
    pub fn with_payload(mut self, payload: serde_json::Value) -> Self {
        self.payload = Some(payload);
        self.payload_version = None;
        self
    }

    /// Sets the payload from any serializable value, untyped (as
    /// [`with_payload`](Self::with_payload)).
    ///
    /// # Errors
    ///
    /// [`WriteError::Payload`] when `payload` does not serialize to JSON.
    pub fn with_payload_of<T: Serialize>(self, payload: &T) -> Result<Self, WriteError> {
        let payload = serde_json::to_value(payload).map_err(|source| WriteError::Payload {
            category: self.category.name(),
            source,
        })?;
        Ok(self.with_payload(payload))
    }

    /// The region-outbox shard of this message.
    pub fn region_shard(&self) -> ShardKey {
        ShardKey::region(self.category.scope(), self.shard_identifier.0)
    }

    /// The control-outbox shard of this message for `region_name`.
    pub fn control_shard(&self, region_name: &str) -> ShardKey {
        ShardKey::control(region_name, self.category.scope(), self.shard_identifier.0)
    }
}

/// A row that was written (visible to others once the transaction commits).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenRow {
    /// The row id.
    pub id: i64,
    /// The message id (UUID v7) the row's deliveries carry.
    pub message_id: Uuid,
    /// Its shard: what a flush after commit drains.
    pub shard: ShardKey,
    /// Its category name.
    pub category: &'static str,
}

/// A write that did not happen. Nothing was written; with a transaction, roll
/// it back (or let it drop).
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The database refused the insert.
    #[error("could not write outbox rows: {0}")]
    Database(#[from] DbErr),
    /// The category is retired; retired categories are kept only so their
    /// numbers are never reused.
    #[error("outbox category {category} is retired and may no longer be written")]
    RetiredCategory {
        /// The category name.
        category: &'static str,
    },
    /// A control message needs a target region.
    #[error("outbox category {category}: a control-outbox row needs a non-empty region name")]
    EmptyRegionName {
        /// The category name.
        category: &'static str,
    },
    /// The payload did not serialize.
    #[error("outbox payload of {category} does not serialize to JSON: {source}")]
    Payload {
        /// The category name.
        category: &'static str,
        /// The serializer's error.
        source: serde_json::Error,
    },
    /// PostgreSQL's `jsonb` cannot store a NUL character (`\u0000`), and
    /// the payload has one in a string or a key. Refused before any
    /// statement runs, so the transaction stays usable.
    #[error(
        "outbox payload of {category} has a NUL character, which PostgreSQL's jsonb cannot store"
    )]
    NulInPayload {
        /// The category name.
        category: &'static str,
    },
    /// The connection is neither PostgreSQL nor SQLite.
    #[error(transparent)]
    UnsupportedBackend(#[from] crate::store::UnsupportedBackend),
    /// The category is declared with `(payload = T)` in the registry, and
    /// the message has no payload version: it was built untyped
    /// ([`OutboxMessage::new`], or a payload set after
    /// [`OutboxMessage::typed`]). A typed receiver would read its payload
    /// as version 1 of `T`, whatever it holds.
    #[error(
        "outbox category {category} is declared with `(payload = {payload_type})`: write it \
         with `OutboxMessage::typed(outbox_categories::{category}, shard, object, &payload)`, \
         which takes a `{payload_type}` and stores its version"
    )]
    UntypedWrite {
        /// The category name.
        category: &'static str,
        /// The payload type the registry declares (its Rust name).
        payload_type: &'static str,
    },
    /// The message's payload version is above the largest the
    /// `payload_version` column stores (`i32::MAX`).
    #[error(
        "outbox payload version {version} of {category} is above {}, the largest the \
         `payload_version` column stores: number the contract's versions from 1",
        i32::MAX
    )]
    PayloadVersionOutOfRange {
        /// The category name.
        category: &'static str,
        /// The version.
        version: u32,
    },
}

crate::error_debug::debug_with_message!(WriteError {
    Database,
    RetiredCategory,
    EmptyRegionName,
    Payload,
    NulInPayload,
    UnsupportedBackend,
    UntypedWrite,
    PayloadVersionOutOfRange
});

/// Writes one region-outbox row on `db` (your transaction).
///
/// # Errors
///
/// [`WriteError`]; nothing is written on error.
#[tracing::instrument(
    name = "outbox.write_region",
    skip_all,
    fields(
        category = %message.category,
        otel.kind = "producer",
        messaging.system = outbox_core::trace::MESSAGING_SYSTEM,
        messaging.operation.type = "send",
        messaging.operation.name = "write",
        messaging.destination.name = %message.category,
    ),
    err
)]
pub async fn write_region<C: Category, Db: ConnectionTrait>(
    db: &Db,
    message: OutboxMessage<C>,
) -> Result<WrittenRow, WriteError> {
    let mut rows = insert(db, OutboxKind::Region, vec![(None, message)]).await?;
    rows.pop()
        .ok_or_else(|| WriteError::Database(DbErr::RecordNotInserted))
}

/// Writes many region-outbox rows on `db`, in order; returns them in the same
/// order.
///
/// # Errors
///
/// [`WriteError`]; with a transaction, nothing is written on error.
#[tracing::instrument(
    name = "outbox.write_region_many",
    skip_all,
    fields(
        otel.kind = "producer",
        messaging.system = outbox_core::trace::MESSAGING_SYSTEM,
        messaging.operation.type = "send",
        messaging.operation.name = "write",
    ),
    err
)]
pub async fn write_region_many<C: Category, Db: ConnectionTrait>(
    db: &Db,
    messages: impl IntoIterator<Item = OutboxMessage<C>>,
) -> Result<Vec<WrittenRow>, WriteError> {
    let rows = messages.into_iter().map(|m| (None, m)).collect();
    insert(db, OutboxKind::Region, rows).await
}

/// Writes one control-outbox row per region in `region_names` on `db`.
///
/// # Errors
///
/// [`WriteError`]; with a transaction, nothing is written on error.
#[tracing::instrument(
    name = "outbox.write_control",
    skip_all,
    fields(
        category = %message.category,
        otel.kind = "producer",
        messaging.system = outbox_core::trace::MESSAGING_SYSTEM,
        messaging.operation.type = "send",
        messaging.operation.name = "write",
        messaging.destination.name = %message.category,
    ),
    err
)]
pub async fn write_control<C: Category, Db: ConnectionTrait>(
    db: &Db,
    region_names: impl IntoIterator<Item = impl Into<String>>,
    message: OutboxMessage<C>,
) -> Result<Vec<WrittenRow>, WriteError> {
    let rows = region_names
        .into_iter()
        .map(|region| (Some(region.into()), message.clone()))
        .collect();
    insert(db, OutboxKind::Control, rows).await
}

/// Writes many control-outbox rows, each with its target region.
///
/// # Errors
///
/// [`WriteError`]; with a transaction, nothing is written on error.
#[tracing::instrument(
    name = "outbox.write_control_many",
    skip_all,
    fields(
        otel.kind = "producer",
        messaging.system = outbox_core::trace::MESSAGING_SYSTEM,
        messaging.operation.type = "send",
        messaging.operation.name = "write",
    ),
    err
)]
pub async fn write_control_many<C: Category, Db: ConnectionTrait>(
    db: &Db,
    messages: impl IntoIterator<Item = (String, OutboxMessage<C>)>,
) -> Result<Vec<WrittenRow>, WriteError> {
    let rows = messages
        .into_iter()
        .map(|(region, message)| (Some(region), message))
        .collect();
    insert(db, OutboxKind::Control, rows).await
}

/// Whether a string or key of `value` holds a NUL character.
fn has_nul(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::String(text) => text.contains('\0'),
        serde_json::Value::Array(items) => items.iter().any(has_nul),
        serde_json::Value::Object(fields) => fields
            .iter()
            .any(|(key, value)| key.contains('\0') || has_nul(value)),
        _ => false,
    }
}

async fn insert<C: Category, Db: ConnectionTrait>(
    db: &Db,
    kind: OutboxKind,
    rows: Vec<(Option<String>, OutboxMessage<C>)>,
) -> Result<Vec<WrittenRow>, WriteError> {
    let backend = db.get_database_backend();
    if !matches!(backend, DbBackend::Postgres | DbBackend::Sqlite) {
        return Err(crate::store::UnsupportedBackend(backend).into());
    }
    for (region, message) in &rows {
        if message.category.is_retired() {
            return Err(WriteError::RetiredCategory {
                category: message.category.name(),
            });
        }
        match (message.payload_version, message.category.payload_type()) {
            (None, Some(payload_type)) => {
                return Err(WriteError::UntypedWrite {
                    category: message.category.name(),
                    payload_type,
                })
            }
            (Some(version), _) if i32::try_from(version).is_err() => {
                return Err(WriteError::PayloadVersionOutOfRange {
                    category: message.category.name(),
                    version,
                })
            }
            _ => {}
        }
        if kind == OutboxKind::Control && region.as_deref().is_none_or(str::is_empty) {
            return Err(WriteError::EmptyRegionName {
                category: message.category.name(),
            });
        }
        if backend == DbBackend::Postgres && message.payload.as_ref().is_some_and(has_nul) {
            return Err(WriteError::NulInPayload {
                category: message.category.name(),
            });
        }
    }
    let now = Utc::now();
    // The span of this write (`outbox.write_*`, a child of the caller's), if
    // an OpenTelemetry layer sees it: the delivery continues its trace.
    let traceparent = outbox_core::TraceParent::current();
    let mut written = Vec::with_capacity(rows.len());
    // Rule 11 on PostgreSQL: the first statement locks every shard the call
    // writes, in one order, before it draws an id (see `shard_lock`).
    let mut locks = match backend {
        DbBackend::Postgres => Some(shard_lock::keys(
            kind,
            rows.iter().map(|(region, message)| {
                (
                    region.as_deref(),
                    message.category.scope().value(),
                    message.shard_identifier.0,
                )
            }),
        )),
        _ => None,
    };
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        // In VALUES order, like the row ids: each row keeps its own.
        let message_ids: Vec<Uuid> = chunk.iter().map(|_| Uuid::now_v7()).collect();
        let (sql, values) = insert_statement(
            backend,
            kind,
            chunk,
            &message_ids,
            now,
            traceparent,
            locks.take().as_deref(),
        );
        let results = db
            .query_all_raw(Statement::from_sql_and_values(backend, &sql, values))
            .await?;
        let mut ids = results
            .iter()
            .map(|row| row.try_get::<i64>("", "id"))
            .collect::<Result<Vec<i64>, DbErr>>()?;
        // Ids of one statement are assigned in VALUES order.
        ids.sort_unstable();
        if ids.len() != chunk.len() {
            return Err(WriteError::Database(DbErr::RecordNotInserted));
        }
        for ((id, message_id), (region, message)) in ids.into_iter().zip(message_ids).zip(chunk) {
            let shard = match region {
                Some(region) => message.control_shard(region),
                None => message.region_shard(),
            };
            outbox_core::OutboxContext::note(&shard, id);
            metrics::counter!(outbox_core::metrics::SAVED, "category" => message.category.name(), "kind" => kind.as_str())
                .increment(1);
            written.push(WrittenRow {
                id,
                message_id,
                shard,
                category: message.category.name(),
            });
        }
    }
    Ok(written)
}

/// The outbox table of `kind`.
fn table(kind: OutboxKind) -> &'static str {
    match kind {
        OutboxKind::Region => "region_outbox",
        OutboxKind::Control => "control_outbox",
    }
}

fn insert_statement<C: Category>(
    backend: DbBackend,
    kind: OutboxKind,
    rows: &[(Option<String>, OutboxMessage<C>)],
    message_ids: &[Uuid],
    now: chrono::DateTime<Utc>,
    traceparent: Option<outbox_core::TraceParent>,
    locks: Option<&[i32]>,
) -> (String, Vec<Value>) {
    let control = kind == OutboxKind::Control;
    // With shard locks, the rows are selected from their VALUES under a
    // filter that takes the locks first: the filter's subquery runs once,
    // before the first row, and every id is then drawn by the column
    // default as its row is produced (VALUES rows in order). Naming the
    // sequence instead (`pg_get_serial_sequence`, a catalog search at
    // every call) cost the insert about a third of its server time.
    let region = if control { "region_name, " } else { "" };
    let rows_from = if locks.is_some() {
        "SELECT * FROM (VALUES "
    } else {
        "VALUES "
    };
    let mut sql = format!(
        "INSERT INTO {} ({region}shard_scope, shard_identifier, category, object_identifier, \
         payload, scheduled_from, scheduled_for, date_added, traceparent, message_id, \
         payload_version) {rows_from}",
        table(kind),
    );
    let mut values = vec![
        time::bind(backend, now),
        time::bind(backend, outbox_core::store::due_at_once()),
        Value::String(traceparent.map(|parent| parent.to_string())),
    ];
    if let Some(locks) = locks {
        values.push(Value::from(shard_lock::class(kind)));
        values.push(match locks {
            [one] => Value::from(*one),
            many => Value::from(many.to_vec()),
        });
    }
    for (i, ((region, message), message_id)) in rows.iter().zip(message_ids).enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        if control {
            values.push(Value::from(region.clone().unwrap_or_default()));
            sql.push_str(&format!("${}, ", values.len()));
        }
        let payload = match backend {
            // JSON text in a `json_text` column.
            DbBackend::Sqlite => Value::String(message.payload.as_ref().map(|p| p.to_string())),
            _ => Value::Json(message.payload.clone().map(Box::new)),
        };
        // `uuid` on PostgreSQL, its 16 bytes on SQLite.
        let message_id = Value::from(*message_id);
        for value in [
            Value::from(message.category.scope().value()),
            Value::from(message.shard_identifier.0),
            Value::from(message.category.value()),
            Value::from(message.object_identifier.0),
            payload,
        ] {
            values.push(value);
            sql.push_str(&format!("${}, ", values.len()));
        }
        // The timestamps and the trace context are shared by the rows.
        values.push(message_id);
        sql.push_str(&format!("$1, $2, $1, $3, ${}, ", values.len()));
        // An `integer`: `insert` refused a version that does not fit.
        values.push(Value::Int(
            message
                .payload_version
                .and_then(|version| i32::try_from(version).ok()),
        ));
        sql.push_str(&format!("${})", values.len()));
    }
    if let Some(locks) = locks {
        // An uncorrelated subquery: PostgreSQL evaluates it once, as a
        // one-time filter, before it reads the first VALUES row.
        let lock = if locks.len() == 1 {
            "SELECT pg_advisory_xact_lock($4, $5)"
        } else {
            "SELECT pg_advisory_xact_lock($4, k) FROM unnest($5::int[]) AS k ORDER BY k"
        };
        sql.push_str(&format!(
            ") AS rows WHERE (SELECT count(*) FROM ({lock}) AS locks) > 0"
        ));
    }
    sql.push_str(" RETURNING id");
    (sql, values)
}
