//! Replicated models: saving or deleting a SeaORM model writes its outbox row in
//! the same transaction, and a receiver replays the latest state (or a
//! tombstone) on the other side. Sentry's `ReplicatedRegionModel` /
//! `ReplicatedControlModel`, in Rust.
//!
//! A model takes two parts:
//!
//! - [`#[derive(ReplicatedRegionModel)]`](derive@ReplicatedRegionModel) (or
//!   [`ReplicatedControlModel`](derive@ReplicatedControlModel)) on the
//!   entity's `Model`, with `#[outbox(category = ...)]`, implements
//!   [`ReplicatedModel`]: category, replication version, shard and object
//!   identifiers. The shard field is inferred from the registry (the scope's
//!   `shard_field`, or the primary key when the table is the scope's
//!   `owner_table`); `#[outbox(shard = field)]` names it otherwise. Every
//!   key of `#[outbox(...)]`, with its default, its errors and an example,
//!   is documented on the derive ([attributes](derive@ReplicatedRegionModel#attributes)).
//! - You implement [`RegionReplication`] (or [`ControlReplication`]): the
//!   payload saved with each change, and the two handlers. The payload is
//!   of the category's type ([`ReplicatedModel::Payload`]):
//!   `serde_json::Value` for an untyped category, the contract of a
//!   category declared with `(payload = T)`, whose version each row records
//!   (see [`outbox_core::contract`]; a tombstone of a version this binary
//!   does not know parks its shard).
//!
//! Hooks: `#[outbox(active_model_behavior)]` generates the entity's
//! `ActiveModelBehavior`, writing the outbox after every save and before every
//! delete (the delete records `payload_for_update` while the row still
//! exists). With your own `ActiveModelBehavior`, call the generated
//! `ActiveModel::outbox_after_save(&model, db)` and
//! `self.outbox_before_delete(db)` from it.
//!
//! SeaORM's hooks run only through `ActiveModelTrait` (`insert`, `update`,
//! `save`, `delete`). **`insert_many`, `update_many`, `delete_many`,
//! `Entity::update(..).exec`, `delete_by_id` and raw SQL skip them and write no
//! outbox**: use the producing helpers of this module ([`bulk_insert`],
//! [`bulk_update`], [`bulk_delete`]) for bulk changes.
//!
//! Delivery: [`ReplicationReceivers::replicate`] registers a model's category
//! on `Receivers`; at delivery the receiver loads the row by id: present →
//! `handle_async_replication`, gone → `handle_async_deletion` with the payload
//! saved at delete time.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use sea_orm::{
    ActiveModelTrait, ConnectionTrait, DatabaseConnection, DbErr, DeleteMany, EntityTrait,
    IntoActiveModel, PrimaryKeyTrait, QuerySelect, UpdateMany,
};
use serde_json::Value;

use outbox_core::{Category, CategoryPayload, HandlerError, Message, OutboxKind, Receivers};

use crate::write::{write_control_many, write_region_many, OutboxMessage, WriteError};

// The docs of a re-export come first on the derive's page: here, the links
// that the derive crate, which does not depend on this one, cannot make.
/// Derives [`ReplicatedModel`] for a region model; implement
/// [`RegionReplication`] next to it, and register the model with
/// [`ReplicationReceivers::replicate`].
///
pub use outbox_seaorm_derive::ReplicatedRegionModel;

/// Derives [`ReplicatedModel`] for a control model; implement
/// [`ControlReplication`] next to it, and register the model with
/// [`ReplicationReceivers::replicate`].
///
pub use outbox_seaorm_derive::ReplicatedControlModel;

/// The primary-key value type of a model's entity.
pub type PrimaryKeyValue<M> =
    <<<M as ReplicatedModel>::Table as EntityTrait>::PrimaryKey as PrimaryKeyTrait>::ValueType;

/// What the replicated-model derives implement: the model's identity in the
/// outbox.
///
/// Implemented by [`ReplicatedRegionModel`](derive@ReplicatedRegionModel)
/// and [`ReplicatedControlModel`](derive@ReplicatedControlModel) from their
/// `#[outbox(...)]` attribute, not by hand; its handlers are the other half,
/// [`RegionReplication`] or [`ControlReplication`], which you implement.
pub trait ReplicatedModel:
    sea_orm::FromQueryResult + Clone + Send + Sync + Sized + 'static
{
    /// The registry's category type.
    type Category: Category;
    /// The model's entity.
    type Table: EntityTrait<Model = Self>;
    /// Region (`ReplicatedRegionModel`) or control (`ReplicatedControlModel`).
    const KIND: OutboxKind;
    /// The category of this model's outbox rows.
    const CATEGORY: Self::Category;
    /// The version of the replication; bump it to backfill existing rows.
    /// Default: 1 (`#[outbox(replication_version = N)]`).
    const REPLICATION_VERSION: u32 = 1;
    /// The name of the field holding the shard identifier.
    const SHARD_FIELD: &'static str;
    /// The payload type of the model's category, as the registry declares
    /// it: `serde_json::Value` for an untyped category, the contract of a
    /// category declared with `(payload = T)` (see
    /// [`outbox_core::contract`]). What
    /// [`payload_for_update`](RegionReplication::payload_for_update)
    /// returns and the deletion handler gets.
    type Payload: CategoryPayload;
    /// The shard identifier of this row (e.g. its organization id).
    fn shard_identifier(&self) -> i64;
    /// The object identifier of this row (its primary key).
    fn object_identifier(&self) -> i64;
    /// The primary key with this object identifier, if it fits the key type.
    fn primary_key_of(object_identifier: i64) -> Option<PrimaryKeyValue<Self>>;

    /// What the handlers get (from [`RegionReplication`] or
    /// [`ControlReplication`]).
    type Context: Send + Sync + 'static;

    /// Writes the outbox rows of `models` on `db`: [`write_region_outboxes`]
    /// or [`write_control_outboxes`].
    fn write_outboxes<'a, C: ConnectionTrait>(
        db: &'a C,
        models: &'a [Self],
    ) -> BoxFuture<'a, Result<(), DbErr>>;

    /// Delivers one message: [`deliver_region`] or [`deliver_control`].
    fn deliver(
        db: DatabaseConnection,
        context: Arc<Self::Context>,
        message: Message<Self::Category>,
    ) -> BoxFuture<'static, Result<(), HandlerError>>;
}

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The side of a region model that you write: its payload and handlers.
///
/// Derive [`ReplicatedRegionModel`](derive@ReplicatedRegionModel) on the
/// model (it implements the supertrait, [`ReplicatedModel`]), implement this
/// trait next to it, and register the model with
/// [`ReplicationReceivers::replicate`]; the derive's documentation has
/// complete examples. A model of the control silo, replicated to regions,
/// implements [`ControlReplication`] instead.
///
/// # When each method runs
///
/// - [`payload_for_update`](Self::payload_for_update): when an outbox row is
///   written, in the writer's transaction: after a save, and before a delete
///   while the row still exists.
/// - [`handle_async_replication`](Self::handle_async_replication): at
///   delivery, when the row with the message's object identifier exists,
///   loaded again: it gets the row's current state, not the state at write
///   time.
/// - [`handle_async_deletion`](Self::handle_async_deletion): at delivery,
///   when that row is gone, with its identifier and the payload of the
///   newest outbox row of the object.
///
/// Delivery is at least once and changes of one object coalesce, so both
/// handlers must be idempotent and need not see every change. A handler's
/// error stops its shard, which is retried as a whole with backoff; an error
/// marked [`permanent`](outbox_core::permanent) is not retried.
#[async_trait]
pub trait RegionReplication: ReplicatedModel {
    /// Data saved with each change; after a delete it is all the deletion
    /// handler gets. Only the newest payload of an object survives
    /// coalescing. Default: none.
    ///
    /// Its type is the category's payload type
    /// ([`ReplicatedModel::Payload`]): `serde_json::Value` for an untyped
    /// category, the registry's contract for a typed one, whose version
    /// the row records.
    fn payload_for_update(&self) -> Option<Self::Payload> {
        None
    }

    /// The row exists: replicate its current state. `context` is the
    /// model's `#[outbox(context = Type)]` (default `()`), as given to
    /// [`ReplicationReceivers::replicate`]; `shard_identifier` is the
    /// message's shard (the model's shard field when it was written). Must
    /// be idempotent.
    async fn handle_async_replication(
        &self,
        context: &Self::Context,
        shard_identifier: i64,
    ) -> Result<(), HandlerError>;

    /// The row is gone: replicate the deletion (a tombstone). `identifier`
    /// is its primary key, and `payload` the newest
    /// [`payload_for_update`](Self::payload_for_update) written for it (the
    /// one saved at delete time). Must be idempotent.
    ///
    /// A typed payload is decoded at the version its row records, upcast
    /// from an older one; a version this binary's contract does not know
    /// parks the shard ([`UnknownVersion`](outbox_core::UnknownVersion))
    /// instead of calling the handler.
    async fn handle_async_deletion(
        context: &Self::Context,
        identifier: i64,
        shard_identifier: i64,
        payload: Option<Self::Payload>,
    ) -> Result<(), HandlerError>;
}

/// The side of a control model that you write: its target regions, payload
/// and handlers (which get the target region).
///
/// Derive [`ReplicatedControlModel`](derive@ReplicatedControlModel) on the
/// model (it implements the supertrait, [`ReplicatedModel`]), implement this
/// trait next to it, and register the model with
/// [`ReplicationReceivers::replicate`]; the derive's documentation has a
/// complete example. It is [`RegionReplication`] with regions: each save or
/// delete writes one control-outbox row per region of
/// [`outbox_region_names`](Self::outbox_region_names), each region's rows
/// form a shard of their own, and both handlers get the region of the row
/// they deliver. The methods run when `RegionReplication`'s do (see
/// [there](RegionReplication#when-each-method-runs)), with the same rules:
/// at least once, coalesced, idempotent handlers.
#[async_trait]
pub trait ControlReplication: ReplicatedModel {
    /// The regions this row replicates to (one outbox row each; none for an
    /// empty list). Called on the connection or transaction of the save or
    /// delete, so it can query it. A change that adds a region (a new
    /// membership) replicates the row there with [`replicate_to_regions`],
    /// which locks the row so that a save at the same time is not missed.
    async fn outbox_region_names<C: ConnectionTrait>(&self, db: &C) -> Result<Vec<String>, DbErr>;

    /// Data saved with each change; after a delete it is all the deletion
    /// handler gets. Default: none. Of the category's payload type, as
    /// [`RegionReplication::payload_for_update`].
    fn payload_for_update(&self) -> Option<Self::Payload> {
        None
    }

    /// The row exists: replicate it to `region_name`. `context` is the
    /// model's `#[outbox(context = Type)]` (default `()`). Must be
    /// idempotent.
    async fn handle_async_replication(
        &self,
        context: &Self::Context,
        region_name: &str,
        shard_identifier: i64,
    ) -> Result<(), HandlerError>;

    /// The row is gone: replicate the deletion to `region_name`, with the
    /// newest payload written for it (decoded as for
    /// [`RegionReplication::handle_async_deletion`]). Must be idempotent.
    async fn handle_async_deletion(
        context: &Self::Context,
        region_name: &str,
        identifier: i64,
        shard_identifier: i64,
        payload: Option<Self::Payload>,
    ) -> Result<(), HandlerError>;
}

fn to_db_error(error: WriteError) -> DbErr {
    match error {
        WriteError::Database(error) => error,
        other => DbErr::Custom(other.to_string()),
    }
}

/// The stored form of a model's payload: JSON, and the version of a typed
/// category's contract (recorded even without a payload, as the version
/// of the writer's contract).
fn encode<M: ReplicatedModel>(payload: Option<&M::Payload>) -> Result<Encoded, DbErr> {
    let json = payload
        .map(CategoryPayload::to_json)
        .transpose()
        .map_err(|source| {
            to_db_error(WriteError::Payload {
                category: M::CATEGORY.name(),
                source,
            })
        })?;
    Ok((json, M::Payload::version()))
}

type Encoded = (Option<Value>, Option<u32>);

fn message<M: ReplicatedModel>(
    model: &M,
    (payload, version): Encoded,
) -> OutboxMessage<M::Category> {
    OutboxMessage {
        category: M::CATEGORY,
        shard_identifier: crate::ShardId(model.shard_identifier()),
        object_identifier: crate::ObjectId(model.object_identifier()),
        payload,
        payload_version: version,
    }
}

/// Writes the region outbox rows of `models` on `db` (after a save, or before
/// a delete).
///
/// # Errors
///
/// The database's error; with a transaction, nothing is written.
pub async fn write_region_outboxes<M: RegionReplication, C: ConnectionTrait>(
    db: &C,
    models: &[M],
) -> Result<(), DbErr> {
    let messages = models
        .iter()
        .map(|model| {
            Ok(message(
                model,
                encode::<M>(model.payload_for_update().as_ref())?,
            ))
        })
        .collect::<Result<Vec<_>, DbErr>>()?;
    write_region_many(db, messages).await.map_err(to_db_error)?;
    Ok(())
}

/// Writes the control outbox rows of `models`, one per target region.
///
/// # Errors
///
/// The database's error; with a transaction, nothing is written.
pub async fn write_control_outboxes<M: ControlReplication, C: ConnectionTrait>(
    db: &C,
    models: &[M],
) -> Result<(), DbErr> {
    let mut messages = Vec::new();
    for model in models {
        let payload = encode::<M>(model.payload_for_update().as_ref())?;
        for region in model.outbox_region_names(db).await? {
            messages.push((region, message(model, payload.clone())));
        }
    }
    write_control_many(db, messages)
        .await
        .map_err(to_db_error)?;
    Ok(())
}

/// Replicates a control model to more regions: what a change that adds to
/// its [`outbox_region_names`](ControlReplication::outbox_region_names)
/// (a membership arrived) calls in its own transaction. Locks the model's
/// row against concurrent saves and deletes (`SELECT … FOR SHARE` on
/// PostgreSQL; SQLite's writers take turns anyway), then writes its outbox
/// rows for `regions`. Returns the model, or `None` when its row does not
/// exist (nothing written).
///
/// The lock is what makes it whole. Without it, a save that runs at the same
/// time reads the regions before this transaction commits (so it writes no
/// row for the new region) while this transaction's delivery reads the
/// model before the save commits: the new region keeps the state from
/// before the save, for good. With it, either the save waits for this
/// transaction (and then reads the new region), or this transaction waits
/// for the save (and delivers what it saved).
///
/// ```
/// # outbox_core::registry! { UserScope = 1 (shard_field = "id", owner_table = "users") { UserUpdate = 10 } }
/// # mod users {
/// #     use outbox_core::HandlerError;
/// #     use outbox_seaorm::replication::{ControlReplication, ReplicatedControlModel};
/// #     use sea_orm::entity::prelude::*;
/// #     #[derive(Clone, Debug, PartialEq, DeriveEntityModel, ReplicatedControlModel)]
/// #     #[sea_orm(table_name = "users")]
/// #     #[outbox(category = crate::OutboxCategory::UserUpdate, active_model_behavior)]
/// #     pub struct Model { #[sea_orm(primary_key)] pub id: i64, pub name: String }
/// #     #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
/// #     pub enum Relation {}
/// #     #[async_trait::async_trait]
/// #     impl ControlReplication for Model {
/// #         async fn outbox_region_names<C: ConnectionTrait>(&self, _: &C) -> Result<Vec<String>, DbErr> { Ok(vec![]) }
/// #         async fn handle_async_replication(&self, _: &(), _: &str, _: i64) -> Result<(), HandlerError> { Ok(()) }
/// #         async fn handle_async_deletion(_: &(), _: &str, _: i64, _: i64, _: Option<serde_json::Value>) -> Result<(), HandlerError> { Ok(()) }
/// #     }
/// # }
/// use outbox_seaorm::replication::replicate_to_regions;
/// use sea_orm::{ConnectionTrait, DbErr};
///
/// /// A user became a member in `region`: record it, and replicate the user
/// /// there (both in the caller's transaction).
/// async fn add_membership<C: ConnectionTrait>(txn: &C, user_id: i64, region: &str) -> Result<(), DbErr> {
///     // … insert the membership …
///     replicate_to_regions::<users::Model, _>(txn, user_id, [region]).await?;
///     Ok(())
/// }
/// # fn main() { let _ = add_membership::<sea_orm::DatabaseConnection>; }
/// ```
///
/// # Errors
///
/// The database's error; with a transaction, nothing is written.
pub async fn replicate_to_regions<M: ControlReplication, C: ConnectionTrait>(
    db: &C,
    object_identifier: i64,
    regions: impl IntoIterator<Item = impl Into<String>>,
) -> Result<Option<M>, DbErr> {
    let Some(key) = M::primary_key_of(object_identifier) else {
        return Ok(None);
    };
    let Some(model) = M::Table::find_by_id(key).lock_shared().one(db).await? else {
        return Ok(None);
    };
    let payload = encode::<M>(model.payload_for_update().as_ref())?;
    let messages = regions
        .into_iter()
        .map(|region| (region.into(), message(&model, payload.clone())))
        .collect::<Vec<_>>();
    write_control_many(db, messages)
        .await
        .map_err(to_db_error)?;
    Ok(Some(model))
}

/// Loads a replicated model by object identifier.
///
/// # Errors
///
/// The database's error.
pub async fn find<M: ReplicatedModel, C: ConnectionTrait>(
    db: &C,
    object_identifier: i64,
) -> Result<Option<M>, DbErr> {
    match M::primary_key_of(object_identifier) {
        Some(key) => M::Table::find_by_id(key).one(db).await,
        None => Ok(None),
    }
}

/// Inserts many rows with one statement and writes one outbox row per row (or
/// per row and region) on the same connection: SeaORM's `insert_many`, plus
/// the outboxes it would skip.
///
/// # Errors
///
/// The database's error; with a transaction, nothing is written.
pub async fn bulk_insert<M, A, C>(
    db: &C,
    rows: impl IntoIterator<Item = A>,
) -> Result<Vec<M>, DbErr>
where
    M: ReplicatedModel + IntoActiveModel<A>,
    A: ActiveModelTrait<Entity = M::Table>,
    C: ConnectionTrait,
{
    let inserted = M::Table::insert_many(rows).exec_with_returning(db).await?;
    M::write_outboxes(db, &inserted).await?;
    Ok(inserted)
}

/// Runs an `update_many` and writes the outbox rows of every updated row.
///
/// # Errors
///
/// The database's error; with a transaction, nothing is written.
pub async fn bulk_update<M, C>(db: &C, update: UpdateMany<M::Table>) -> Result<Vec<M>, DbErr>
where
    M: ReplicatedModel,
    C: ConnectionTrait,
{
    let updated = update.exec_with_returning(db).await?;
    M::write_outboxes(db, &updated).await?;
    Ok(updated)
}

/// Runs a `delete_many` and writes the outbox rows of every deleted row, with
/// the payload each had.
///
/// # Errors
///
/// The database's error; with a transaction, nothing is written.
pub async fn bulk_delete<M, C>(db: &C, delete: DeleteMany<M::Table>) -> Result<Vec<M>, DbErr>
where
    M: ReplicatedModel,
    C: ConnectionTrait,
{
    let deleted = delete.exec_with_returning(db).await?;
    M::write_outboxes(db, &deleted).await?;
    Ok(deleted)
}

/// Delivers one region message: load the row, then replicate it, or handle
/// its deletion when it is gone.
///
/// # Errors
///
/// The handler's error, or the database's.
pub async fn deliver_region<M: RegionReplication>(
    db: DatabaseConnection,
    context: Arc<M::Context>,
    message: Message<M::Category>,
) -> Result<(), HandlerError> {
    let shard = message.shard_identifier();
    match find::<M, _>(&db, message.object_identifier).await? {
        Some(model) => model.handle_async_replication(&context, shard).await,
        None => {
            let payload = deletion_payload::<M>(&message)?;
            M::handle_async_deletion(&context, message.object_identifier, shard, payload).await
        }
    }
}

/// What a deletion handler gets: the message's payload, decoded into the
/// model's payload type (a stored text that is not of it fails the
/// delivery with `PayloadError::Malformed`; a typed payload of a version
/// the contract does not know parks the shard with `UnknownVersion`).
fn deletion_payload<M: ReplicatedModel>(
    message: &Message<M::Category>,
) -> Result<Option<M::Payload>, HandlerError> {
    M::Payload::from_message(message)
}

/// Delivers one control message for its region: load the row, then replicate
/// it, or handle its deletion when it is gone.
///
/// # Errors
///
/// The handler's error, or the database's.
pub async fn deliver_control<M: ControlReplication>(
    db: DatabaseConnection,
    context: Arc<M::Context>,
    message: Message<M::Category>,
) -> Result<(), HandlerError> {
    let shard = message.shard_identifier();
    let region = message.region_name().unwrap_or_default().to_owned();
    match find::<M, _>(&db, message.object_identifier).await? {
        Some(model) => {
            model
                .handle_async_replication(&context, &region, shard)
                .await
        }
        None => {
            M::handle_async_deletion(
                &context,
                &region,
                message.object_identifier,
                shard,
                deletion_payload::<M>(&message)?,
            )
            .await
        }
    }
}

/// Registers replicated models on [`Receivers`].
///
/// ```
/// # outbox_core::registry! {
/// #     OrganizationScope = 0 (shard_field = "organization_id") { ProjectUpdate = 2 }
/// # }
/// # mod project {
/// #     use outbox_core::HandlerError;
/// #     use outbox_seaorm::replication::{RegionReplication, ReplicatedRegionModel};
/// #     use sea_orm::entity::prelude::*;
/// #     #[derive(Clone, Debug, PartialEq, DeriveEntityModel, ReplicatedRegionModel)]
/// #     #[sea_orm(table_name = "project")]
/// #     #[outbox(category = crate::OutboxCategory::ProjectUpdate, active_model_behavior)]
/// #     pub struct Model { #[sea_orm(primary_key)] pub id: i64, pub organization_id: i64 }
/// #     #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
/// #     pub enum Relation {}
/// #     #[async_trait::async_trait]
/// #     impl RegionReplication for Model {
/// #         async fn handle_async_replication(&self, _: &(), _: i64) -> Result<(), HandlerError> { Ok(()) }
/// #         async fn handle_async_deletion(_: &(), _: i64, _: i64, _: Option<serde_json::Value>) -> Result<(), HandlerError> { Ok(()) }
/// #     }
/// # }
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let db = sea_orm::Database::connect("sqlite::memory:").await?;
/// use std::sync::Arc;
///
/// use outbox_core::Receivers;
/// use outbox_seaorm::replication::ReplicationReceivers;
///
/// // `project::Model` derives `ReplicatedRegionModel` with no `context`: `()`.
/// let receivers = Receivers::new().replicate::<project::Model>(db.clone(), Arc::new(()));
/// receivers.ensure_complete()?; // every category of the registry has a receiver
/// # Ok(()) }
/// ```
pub trait ReplicationReceivers<C: Category>: Sized {
    /// Registers `M`'s category: at delivery, `M` is loaded by id from `db`
    /// and replicated, or its deletion handled when it is gone.
    ///
    /// `context` is what the handlers get: the context itself, or an `Arc`
    /// of it to share one between several models
    /// (`.replicate::<A>(db.clone(), client.clone()).replicate::<B>(db, client)`
    /// with `client: Arc<Client>`).
    fn replicate<M: ReplicatedModel<Category = C>>(
        self,
        db: DatabaseConnection,
        context: impl Into<Arc<M::Context>>,
    ) -> Self;
}

impl<C: Category> ReplicationReceivers<C> for Receivers<C> {
    fn replicate<M: ReplicatedModel<Category = C>>(
        self,
        db: DatabaseConnection,
        context: impl Into<Arc<M::Context>>,
    ) -> Self {
        let context = context.into();
        let deliver = move |message: Message<C>| M::deliver(db.clone(), context.clone(), message);
        match M::Payload::accepted_versions() {
            Some(versions) => self.on_accepting(M::CATEGORY, versions, deliver),
            None => self.on(M::CATEGORY, deliver),
        }
    }
}
