//! Derive macros for `outbox-seaorm`: [`ReplicatedRegionModel`] and
//! [`ReplicatedControlModel`]. Use them through their re-exports in
//! `outbox_seaorm::replication`, whose module documentation is the guide to
//! replicated models. The `test` attribute is `outbox-testing`'s
//! (`#[outbox_testing::test]`, its feature `seaorm`).
//!
//! On a SeaORM entity's `Model`, a derive and an `#[outbox(...)]` attribute
//! make every save and delete write the model's outbox row in the same
//! transaction; you implement the handlers (`RegionReplication` or
//! `ControlReplication`), which the receiver calls with the row's current
//! state, or with the payload saved at delete time once the row is gone.
//!
//! ```
//! outbox_core::registry! {
//!     OrganizationScope = 0 (shard_field = "organization_id", owner_table = "organization") {
//!         OrganizationUpdate = 1,
//!         ProjectUpdate = 2,
//!     }
//! }
//! use std::sync::{Arc, Mutex};
//!
//! /// What the handlers get: a log standing in for the other silo.
//! #[derive(Default)]
//! pub struct Replica(Mutex<Vec<(i64, i64)>>);
//!
//! mod project {
//!     use super::{OutboxCategory, Replica};
//!     use outbox_core::HandlerError;
//!     use outbox_seaorm::replication::{RegionReplication, ReplicatedRegionModel};
//!     use sea_orm::entity::prelude::*;
//!
//!     #[derive(Clone, Debug, PartialEq, DeriveEntityModel, ReplicatedRegionModel)]
//!     #[sea_orm(table_name = "project")]
//!     #[outbox(category = OutboxCategory::ProjectUpdate, context = Replica, active_model_behavior)]
//!     pub struct Model {
//!         #[sea_orm(primary_key)]
//!         pub id: i64,
//!         pub organization_id: i64, // the shard: the scope's `shard_field`
//!         pub name: String,
//!     }
//!
//!     #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
//!     pub enum Relation {}
//!
//!     #[async_trait::async_trait]
//!     impl RegionReplication for Model {
//!         async fn handle_async_replication(&self, replica: &Replica, shard: i64) -> Result<(), HandlerError> {
//!             replica.0.lock().unwrap().push((shard, self.id));
//!             Ok(())
//!         }
//!         async fn handle_async_deletion(
//!             _: &Replica,
//!             _id: i64,
//!             _shard: i64,
//!             _payload: Option<serde_json::Value>,
//!         ) -> Result<(), HandlerError> {
//!             Ok(())
//!         }
//!     }
//! }
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use outbox_core::{Drainer, OutboxKind, Receivers};
//! use outbox_seaorm::entity::region_outbox;
//! use outbox_seaorm::replication::ReplicationReceivers;
//! use outbox_seaorm::SeaOrmStore;
//! use sea_orm::{ActiveModelTrait, ConnectionTrait, EntityTrait, Schema, Set, TransactionTrait};
//! use sea_orm_migration::MigratorTrait;
//!
//! let db = sea_orm::Database::connect("sqlite::memory:").await?;
//! outbox_migrations::OutboxMigrator::up(&db, None).await?;
//! let schema = Schema::new(db.get_database_backend());
//! db.execute(&schema.create_table_from_entity(project::Entity)).await?;
//!
//! // Write: the project and its outbox row commit together.
//! let txn = db.begin().await?;
//! project::ActiveModel { id: Set(7), organization_id: Set(3), name: Set("web".into()) }
//!     .insert(&txn)
//!     .await?;
//! txn.commit().await?;
//! let rows = region_outbox::Entity::find().all(&db).await?;
//! assert_eq!((rows[0].shard_identifier, rows[0].object_identifier), (3, 7));
//!
//! // Deliver: the receiver loads project 7 and calls its handler.
//! let replica = Arc::new(Replica::default());
//! let receivers = Receivers::new().replicate::<project::Model>(db.clone(), replica.clone());
//! Drainer::new(SeaOrmStore::new(db.clone())?, receivers)
//!     .drain_due(OutboxKind::Region)
//!     .await?;
//! assert_eq!(*replica.0.lock().unwrap(), [(3, 7)]);
//! assert!(region_outbox::Entity::find().all(&db).await?.is_empty());
//! # Ok(()) }
//! ```
//!
//! # Attributes
//!
//! Both derives take the same `#[outbox(...)]` keys, each documented with
//! its default, its errors and an example on [`ReplicatedRegionModel`]:
//!
//! | Attribute | What it sets | Default |
//! |---|---|---|
//! | [`category = OutboxCategory::Variant`](derive@ReplicatedRegionModel#category) | the category of the model's outbox rows | none: required |
//! | [`context = Type`](derive@ReplicatedRegionModel#context) | what the handlers get, `&Type` | `()` |
//! | [`shard = field`](derive@ReplicatedRegionModel#shard) | the field that holds the shard identifier | inferred from the registry |
//! | [`replication_version = N`](derive@ReplicatedRegionModel#replication_version) | the coded version, for the backfill | `1` |
//! | [`active_model_behavior`](derive@ReplicatedRegionModel#active_model_behavior) | generate the entity's `ActiveModelBehavior` | off: you write it |
//!
//! With `#[sea_orm::model]` (dense format), SeaORM copies the derives onto the
//! generated `ModelEx`; the derives skip any struct whose name ends in `Ex`,
//! so nothing expands twice.

#![cfg_attr(docsrs, feature(doc_cfg))]

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote};
use syn::{
    parse_macro_input, spanned::Spanned, Data, DeriveInput, Expr, ExprLit, Fields, Ident, Lit,
    Meta, Path, Type,
};

#[doc = include_str!("docs/replicated_region_model.md")]
#[proc_macro_derive(ReplicatedRegionModel, attributes(outbox))]
pub fn derive_replicated_region_model(input: TokenStream) -> TokenStream {
    derive(parse_macro_input!(input as DeriveInput), Kind::Region).into()
}

#[doc = include_str!("docs/replicated_control_model.md")]
#[proc_macro_derive(ReplicatedControlModel, attributes(outbox))]
pub fn derive_replicated_control_model(input: TokenStream) -> TokenStream {
    derive(parse_macro_input!(input as DeriveInput), Kind::Control).into()
}

/// Expands the derive, or reports its error alone: when the attribute asked
/// for the `ActiveModelBehavior` (even if another key of it does not parse),
/// a plain one stands in for it, so the user sees what to fix in
/// `#[outbox(...)]` and not a cascade of errors about the missing trait.
fn derive(input: DeriveInput, kind: Kind) -> TokenStream2 {
    let wants_behavior = match parse_options(&input) {
        Ok(options) => options.active_model_behavior,
        Err(_) => names_active_model_behavior(&input),
    };
    match expand(input, kind) {
        Ok(tokens) => tokens,
        Err(error) => {
            let mut tokens = error.into_compile_error();
            if wants_behavior {
                tokens.extend(quote! {
                    impl ::outbox_seaorm::sea_orm::ActiveModelBehavior for ActiveModel {}
                });
            }
            tokens
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Region,
    Control,
}

#[derive(Default)]
struct Options {
    category: Option<Path>,
    shard: Option<Ident>,
    context: Option<Type>,
    replication_version: Option<u32>,
    active_model_behavior: bool,
}

const INTEGERS: &[&str] = &["i8", "i16", "i32", "i64", "u8", "u16", "u32"];

fn expand(input: DeriveInput, kind: Kind) -> syn::Result<TokenStream2> {
    let ident = &input.ident;
    // `#[sea_orm::model]` copies derives onto `ModelEx`: expand once, on `Model`.
    if ident.to_string().ends_with("Ex") {
        return Ok(TokenStream2::new());
    }
    let options = parse_options(&input)?;
    let category = options.category.ok_or_else(|| {
        syn::Error::new(
            Span::call_site(),
            "missing category: add #[outbox(category = OutboxCategory::YourCategory)]",
        )
    })?;
    if category.segments.len() < 2 {
        return Err(syn::Error::new(
            category.span(),
            "write the category as `OutboxCategory::Variant`",
        ));
    }
    let mut category_type = category.clone();
    category_type.segments.pop();
    category_type.segments.pop_punct();
    let table = table_name(&input)?.unwrap_or_else(|| ident.to_string());

    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new(
            input.span(),
            "replicated models are structs",
        ));
    };
    let Fields::Named(fields) = &data.fields else {
        return Err(syn::Error::new(
            input.span(),
            "replicated models have named fields",
        ));
    };
    let mut primary_key: Option<(Ident, Type)> = None;
    let mut integer_fields: Vec<Ident> = Vec::new();
    for field in &fields.named {
        let Some(name) = field.ident.clone() else {
            continue;
        };
        if is_primary_key(field)? {
            if primary_key.is_some() {
                return Err(syn::Error::new(
                    field.span(),
                    "replicated models need a single-column primary key",
                ));
            }
            primary_key = Some((name.clone(), field.ty.clone()));
        }
        if is_integer(&field.ty) {
            integer_fields.push(name);
        }
    }
    let (pk, pk_type) = primary_key.ok_or_else(|| {
        syn::Error::new(
            input.span(),
            "no #[sea_orm(primary_key)] field: replicated models are found by primary key",
        )
    })?;
    if !is_integer(&pk_type) {
        return Err(syn::Error::new(
            pk_type.span(),
            "the primary key of a replicated model must be an integer (it is the object identifier)",
        ));
    }

    let field_names: Vec<String> = integer_fields.iter().map(ToString::to_string).collect();
    let shard_index = match &options.shard {
        Some(shard) => {
            let wanted = shard.to_string();
            let index = field_names
                .iter()
                .position(|name| *name == wanted)
                .ok_or_else(|| {
                    syn::Error::new(
                        shard.span(),
                        format!(
                            "no integer field `{shard}` on `{ident}`; #[outbox(shard = ...)] must \
                             name one of: {}",
                            field_names.join(", ")
                        ),
                    )
                })?;
            quote!(#index)
        }
        None => {
            let pk_name = pk.to_string();
            quote! {
                ::outbox_seaorm::outbox_core::registry::infer_shard_field(
                    (#category).scope().shard_field(),
                    (#category).scope().owner_table(),
                    #table,
                    #pk_name,
                    &[#(#field_names),*],
                )
            }
        }
    };
    let arms = integer_fields
        .iter()
        .enumerate()
        .map(|(index, field)| quote!(#index => self.#field as i64,));
    let context = options.context.unwrap_or_else(|| syn::parse_quote!(()));
    let version = options.replication_version.unwrap_or(1);
    let (kind_tokens, write_fn, deliver_fn) = match kind {
        Kind::Region => (
            quote!(Region),
            quote!(write_region_outboxes),
            quote!(deliver_region),
        ),
        Kind::Control => (
            quote!(Control),
            quote!(write_control_outboxes),
            quote!(deliver_control),
        ),
    };
    let check = format_ident!("__OUTBOX_SHARD_OF_{}", ident.to_string().to_uppercase());
    let behavior = options.active_model_behavior.then(|| {
        quote! {
            #[::outbox_seaorm::sea_orm::prelude::async_trait::async_trait]
            impl ::outbox_seaorm::sea_orm::ActiveModelBehavior for ActiveModel {
                async fn after_save<C>(
                    model: #ident,
                    db: &C,
                    _insert: bool,
                ) -> ::core::result::Result<#ident, ::outbox_seaorm::sea_orm::DbErr>
                where
                    C: ::outbox_seaorm::sea_orm::ConnectionTrait,
                {
                    ActiveModel::outbox_after_save(&model, db).await?;
                    ::core::result::Result::Ok(model)
                }

                async fn before_delete<C>(self, db: &C) -> ::core::result::Result<Self, ::outbox_seaorm::sea_orm::DbErr>
                where
                    C: ::outbox_seaorm::sea_orm::ConnectionTrait,
                {
                    self.outbox_before_delete(db).await?;
                    ::core::result::Result::Ok(self)
                }
            }
        }
    });

    Ok(quote! {
        // Evaluated by every build: an uninferable shard fails here, naming
        // the attribute to add.
        #[allow(non_upper_case_globals, dead_code)]
        const #check: usize = #shard_index;

        impl ::outbox_seaorm::replication::ReplicatedModel for #ident {
            type Category = #category_type;
            type Table = Entity;
            type Context = #context;
            const KIND: ::outbox_seaorm::outbox_core::OutboxKind =
                ::outbox_seaorm::outbox_core::OutboxKind::#kind_tokens;
            const CATEGORY: #category_type = #category;
            const REPLICATION_VERSION: u32 = #version;
            const SHARD_FIELD: &'static str = [#(#field_names),*][#check];
            type Payload = <#category_type as ::outbox_seaorm::outbox_core::contract::PayloadOf<{ #category as i32 }>>::Payload;

            fn shard_identifier(&self) -> i64 {
                match #check {
                    #(#arms)*
                    // The index was checked against these fields at compile time.
                    _ => ::core::unreachable!(),
                }
            }

            fn object_identifier(&self) -> i64 {
                self.#pk as i64
            }

            fn primary_key_of(
                object_identifier: i64,
            ) -> ::core::option::Option<::outbox_seaorm::replication::PrimaryKeyValue<Self>> {
                <#pk_type as ::core::convert::TryFrom<i64>>::try_from(object_identifier).ok()
            }

            fn write_outboxes<'a, C: ::outbox_seaorm::sea_orm::ConnectionTrait>(
                db: &'a C,
                models: &'a [Self],
            ) -> ::outbox_seaorm::replication::BoxFuture<'a, ::core::result::Result<(), ::outbox_seaorm::sea_orm::DbErr>> {
                ::std::boxed::Box::pin(::outbox_seaorm::replication::#write_fn(db, models))
            }

            fn deliver(
                db: ::outbox_seaorm::sea_orm::DatabaseConnection,
                context: ::std::sync::Arc<Self::Context>,
                message: ::outbox_seaorm::outbox_core::Message<Self::Category>,
            ) -> ::outbox_seaorm::replication::BoxFuture<'static, ::core::result::Result<(), ::outbox_seaorm::outbox_core::HandlerError>> {
                ::std::boxed::Box::pin(::outbox_seaorm::replication::#deliver_fn::<Self>(db, context, message))
            }
        }

        impl ActiveModel {
            /// Writes this model's outbox rows after a save; call it from your
            /// own `ActiveModelBehavior::after_save`.
            pub async fn outbox_after_save<C: ::outbox_seaorm::sea_orm::ConnectionTrait>(
                model: &#ident,
                db: &C,
            ) -> ::core::result::Result<(), ::outbox_seaorm::sea_orm::DbErr> {
                <#ident as ::outbox_seaorm::replication::ReplicatedModel>::write_outboxes(
                    db,
                    ::core::slice::from_ref(model),
                )
                .await
            }

            /// Writes the outbox rows of the row about to be deleted, with its
            /// payload, while it still exists; call it from your own
            /// `ActiveModelBehavior::before_delete`.
            pub async fn outbox_before_delete<C: ::outbox_seaorm::sea_orm::ConnectionTrait>(
                &self,
                db: &C,
            ) -> ::core::result::Result<(), ::outbox_seaorm::sea_orm::DbErr> {
                let key = match &self.#pk {
                    ::outbox_seaorm::sea_orm::ActiveValue::Set(key)
                    | ::outbox_seaorm::sea_orm::ActiveValue::Unchanged(key) => key.clone(),
                    ::outbox_seaorm::sea_orm::ActiveValue::NotSet => return ::core::result::Result::Ok(()),
                };
                let found = <Entity as ::outbox_seaorm::sea_orm::EntityTrait>::find_by_id(key)
                    .one(db)
                    .await?;
                match found {
                    ::core::option::Option::Some(model) => ActiveModel::outbox_after_save(&model, db).await,
                    ::core::option::Option::None => ::core::result::Result::Ok(()),
                }
            }
        }

        #behavior
    })
}

fn parse_options(input: &DeriveInput) -> syn::Result<Options> {
    let mut options = Options::default();
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("outbox")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("category") {
                options.category = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("shard") {
                options.shard = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("context") {
                options.context = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("replication_version") {
                let value: syn::LitInt = meta.value()?.parse()?;
                options.replication_version = Some(value.base10_parse()?);
            } else if meta.path.is_ident("active_model_behavior") {
                options.active_model_behavior = true;
            } else {
                return Err(meta.error(
                    "unknown #[outbox] key; expected category, shard, context, \
                     replication_version or active_model_behavior",
                ));
            }
            Ok(())
        })?;
    }
    Ok(options)
}

/// Whether an `#[outbox(...)]` attribute lists `active_model_behavior`, read
/// from its tokens: for when another key does not parse.
fn names_active_model_behavior(input: &DeriveInput) -> bool {
    input
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("outbox"))
        .any(|attr| match &attr.meta {
            Meta::List(list) => list.tokens.clone().into_iter().any(|token| {
                matches!(&token, proc_macro2::TokenTree::Ident(ident) if ident == "active_model_behavior")
            }),
            _ => false,
        })
}

fn table_name(input: &DeriveInput) -> syn::Result<Option<String>> {
    let mut table = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("sea_orm")) {
        let Meta::List(list) = &attr.meta else {
            continue;
        };
        let metas = list
            .parse_args_with(syn::punctuated::Punctuated::<Meta, syn::Token![,]>::parse_terminated);
        let Ok(metas) = metas else {
            continue;
        };
        for meta in metas {
            if let Meta::NameValue(pair) = meta {
                if pair.path.is_ident("table_name") {
                    if let Expr::Lit(ExprLit {
                        lit: Lit::Str(value),
                        ..
                    }) = pair.value
                    {
                        table = Some(value.value());
                    }
                }
            }
        }
    }
    Ok(table)
}

fn is_primary_key(field: &syn::Field) -> syn::Result<bool> {
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("sea_orm")) {
        let Meta::List(list) = &attr.meta else {
            continue;
        };
        if list
            .tokens
            .clone()
            .into_iter()
            .any(|token| token.to_string() == "primary_key")
        {
            return Ok(true);
        }
    }
    Ok(false)
}

fn is_integer(ty: &Type) -> bool {
    match ty {
        Type::Path(path) => path
            .path
            .get_ident()
            .is_some_and(|ident| INTEGERS.contains(&ident.to_string().as_str())),
        _ => false,
    }
}

mod test_attr;

/// Runs an `async fn name(db: TestDatabase)` as a test on a fresh database,
/// once per backend: tests `name::postgres` and `name::sqlite`. Used as
/// `#[outbox_testing::test]` (the `outbox-testing` crate, feature `seaorm`;
/// the expansion names `::outbox_testing::database`); see
/// `outbox_testing::database` for the guide and a compiled example.
///
/// ```ignore
/// #[outbox_testing::test(migrator = crate::Migrator)]
/// async fn orders_are_written(db: TestDatabase) {
///     // ...
/// }
/// ```
///
/// Options, between the parentheses, separated by commas:
///
/// - `migrator = path::to::Migrator`: apply this `MigratorTrait`'s
///   migrations instead of the outbox's own (`OutboxMigrator`), for an
///   application whose migrator embeds `outbox_migrations::migrations()`;
/// - `no_migrations`: an empty database;
/// - `sqlite` or `postgres`: that backend only (both when neither or both
///   are given).
///
/// Each test runs in a multi-thread Tokio runtime of its own. The function
/// returns `()` or `Result<(), E>` with `E: Debug`; `#[ignore]` and
/// `#[should_panic]` below the attribute apply to each generated test.
#[proc_macro_attribute]
pub fn test(attr: TokenStream, item: TokenStream) -> TokenStream {
    test_attr::test(attr.into(), item.into()).into()
}

/// `#[outbox_seaorm::test]`, the attribute's old path (re-exported by
/// `outbox-seaorm` as `test`): the same expansion, and a deprecation
/// warning that names the new one. Until 0.2.
#[deprecated(
    since = "0.1.1",
    note = "use `#[outbox_testing::test]`: add `outbox-testing = { version = \"0.1\", features = [\"seaorm\"] }` to [dev-dependencies]"
)]
#[doc(hidden)]
#[proc_macro_attribute]
pub fn seaorm_test(attr: TokenStream, item: TokenStream) -> TokenStream {
    test_attr::test(attr.into(), item.into()).into()
}
