//! The compile-time registry of outbox scopes and categories.
//!
//! A *scope* is the sharding namespace of an outbox row (organization, user, audit
//! log, …); a *category* is what the row means (organization updated, user
//! deleted, …). Every category belongs to exactly one scope, and both carry a
//! stable integer that is stored in the database, so numbers are never reused and
//! retired entries stay declared.
//!
//! Declare them once with [`registry!`](crate::registry!):
//!
//! ```
//! outbox_core::registry! {
//!     /// Data owned by an organization; sharded by organization id.
//!     OrganizationScope = 0 (shard_field = "organization_id", owner_table = "organization") {
//!         /// An organization was created, renamed or deleted.
//!         OrganizationUpdate = 1,
//!         /// A member joined, changed role or left.
//!         OrganizationMemberUpdate = 2,
//!         /// Kept so that number 3 is never reused.
//!         OrganizationLegacyPing = 3 (retired),
//!         /// A webhook per change: never coalesced, each one is delivered.
//!         OrganizationWebhook = 4 (no_coalesce),
//!     }
//!     /// One shard per audit event, so a stuck event blocks nothing else.
//!     AuditLogScope = 1 {
//!         AuditLogEvent = 10,
//!     }
//! }
//!
//! use outbox_core::{Category, Scope};
//!
//! assert_eq!(OutboxCategory::OrganizationUpdate.scope(), OutboxScope::OrganizationScope);
//! assert_eq!(OutboxCategory::try_from(10), Ok(OutboxCategory::AuditLogEvent));
//! assert!(OutboxCategory::try_from(99).is_err());
//! assert_eq!(OutboxCategory::AuditLogEvent.name(), "AuditLogEvent");
//! assert!(OutboxCategory::OrganizationLegacyPing.is_retired());
//! assert!(OutboxCategory::OrganizationUpdate.coalesces());
//! assert!(!OutboxCategory::OrganizationWebhook.coalesces());
//! assert_eq!(OutboxScope::OrganizationScope.shard_field(), Some("organization_id"));
//! assert_eq!(OutboxScope::OrganizationScope.owner_table(), Some("organization"));
//! const SCOPE: OutboxScope = OutboxCategory::AuditLogEvent.scope(); // usable in constants
//! assert_eq!(SCOPE, OutboxScope::AuditLogScope);
//! ```
//!
//! # What the compiler rejects
//!
//! The macro expands to two `#[repr(i32)]` enums, so the compiler itself refuses
//! a category listed under two scopes (a variant defined twice), a category or
//! scope number used twice (a discriminant assigned twice), and a flag other than
//! `(retired)` or `(no_coalesce)` after a category number (a
//! constant-evaluation error). The crate's `tests/ui` directory proves each
//! case with trybuild.
//!
//! # Flags
//!
//! - `(retired)`: the category is no longer written and needs no receiver; it
//!   stays declared so that its number is never reused.
//! - `(no_coalesce)`: every message of the category is delivered, one by one
//!   in the order written, where other categories deliver only the newest
//!   message about an object. For events that each matter (a webhook per
//!   price change, an audit entry), without inventing a unique object id.

pub mod contract;

use std::fmt::{Debug, Display};
use std::hash::Hash;

/// A category value read from the database that this binary does not know.
///
/// A row with such a category holds its shard (it is neither delivered nor
/// deleted) until a binary that knows the category drains it.
#[derive(Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown outbox category {0}: this binary's registry does not declare it; \
     deploy a binary that does, or cull the row"
)]
pub struct UnknownCategory(pub i32);

crate::error_debug::debug_with_message!(UnknownCategory);

/// A scope value read from the database that this binary does not know.
#[derive(Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown outbox scope {0}: this binary's registry does not declare it")]
pub struct UnknownScope(pub i32);

crate::error_debug::debug_with_message!(UnknownScope);

/// An outbox scope: the namespace that, with a shard identifier, forms a shard.
///
/// Implemented by the `OutboxScope` enum that [`registry!`](crate::registry!)
/// generates; there is no reason to implement it by hand.
pub trait Scope:
    Copy
    + Eq
    + Hash
    + Ord
    + Debug
    + Display
    + Send
    + Sync
    + 'static
    + TryFrom<i32, Error = UnknownScope>
{
    /// Every declared scope, in declaration order.
    const ALL: &'static [Self];
    /// The stable integer stored in `shard_scope`.
    fn value(self) -> i32;
    /// The declared name, for logs and metric tags.
    fn name(self) -> &'static str;
    /// The model field that holds this scope's shard identifier, if declared
    /// (for example `organization_id`). Used by the replicated-model derives.
    fn shard_field(self) -> Option<&'static str>;
    /// The table whose rows are the shards themselves, if declared (for
    /// example `organization`: an organization's shard is its own id).
    fn owner_table(self) -> Option<&'static str>;
}

/// An outbox category: what a message means, and so which receiver handles it.
///
/// Implemented by the `OutboxCategory` enum that [`registry!`](crate::registry!)
/// generates.
pub trait Category:
    Copy
    + Eq
    + Hash
    + Ord
    + Debug
    + Display
    + Send
    + Sync
    + 'static
    + TryFrom<i32, Error = UnknownCategory>
{
    /// The scope type of the same registry.
    type Scope: Scope;
    /// Every declared category, retired ones included, in declaration order.
    const ALL: &'static [Self];
    /// The stable integer stored in `category`.
    fn value(self) -> i32;
    /// The declared name, for logs and metric tags.
    fn name(self) -> &'static str;
    /// The one scope this category belongs to.
    fn scope(self) -> Self::Scope;
    /// Whether the category is retired: kept so its number is never reused, no
    /// longer written, and not required to have a receiver.
    fn is_retired(self) -> bool;
    /// The payload type declared with `(payload = T)`, if any (its Rust
    /// name): such a category is written and received typed (see
    /// [`crate::registry::contract`]).
    fn payload_type(self) -> Option<&'static str> {
        None
    }
    /// The declared payload type's contract: its version and every version
    /// it reads, with their JSON Schemas (built when asked).
    fn contract(self) -> Option<crate::registry::contract::ContractInfo> {
        None
    }
    /// The version of the declared payload type this binary writes, if the
    /// category is typed.
    fn payload_version(self) -> Option<u32> {
        None
    }
    /// Whether messages of this category about one object coalesce (only the
    /// newest is delivered), as every category does unless declared
    /// `(no_coalesce)`: then each message written is delivered, in order.
    fn coalesces(self) -> bool;
}

/// The flags a category of [`registry!`](crate::registry!) takes, in
/// parentheses after its number: `(retired)`, `(no_coalesce)`, or both.
pub const CATEGORY_FLAGS: [&str; 2] = ["retired", "no_coalesce"];

/// Checks a flag written on a category of [`registry!`](crate::registry!):
/// one of [`CATEGORY_FLAGS`], or `payload = <type>` (`typed` says whether
/// a type followed the name).
///
/// Evaluated in a constant, so a misspelt flag fails the build.
pub const fn check_category_flag(flag: &str, typed: bool) -> bool {
    if typed {
        if str_eq(flag, "payload") {
            return true;
        }
        panic!("unknown registry key: a category's type is declared as `(payload = <type>)`")
    }
    let mut i = 0;
    while i < CATEGORY_FLAGS.len() {
        if str_eq(flag, CATEGORY_FLAGS[i]) {
            return true;
        }
        i += 1;
    }
    panic!(
        "unknown registry flag: a category takes `(retired)`, `(no_coalesce)`, \
         `(payload = <type>)` or several of them, e.g. `(payload = OrgV2, no_coalesce)`"
    )
}

/// True: used by [`registry!`](crate::registry!) to say, in a constant,
/// that a type followed a flag's name.
#[doc(hidden)]
pub const fn names_a_type<T: ?Sized>() -> bool {
    true
}

/// Declares the outbox scopes and their categories; generates `OutboxScope` and
/// `OutboxCategory`.
///
/// See the [module documentation](mod@crate::registry) for the syntax and what the
/// compiler rejects.
#[macro_export]
macro_rules! registry {
    (
        $(
            $(#[doc = $scope_doc:literal])*
            $scope:ident = $scope_value:literal
                $( ( shard_field = $shard_field:literal $(, owner_table = $owner_table:literal)? ) )? {
                $(
                    $(#[doc = $category_doc:literal])*
                    $category:ident = $category_value:literal
                        $( ( $($flag:ident $(= $payload:ty)?),+ $(,)? ) )?
                ),* $(,)?
            }
        )*
    ) => {
        /// The outbox scopes declared by this crate's `registry!`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(i32)]
        pub enum OutboxScope {
            $(
                $(#[doc = $scope_doc])*
                $scope = $scope_value,
            )*
        }

        /// The outbox categories declared by this crate's `registry!`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(i32)]
        pub enum OutboxCategory {
            $($(
                $(#[doc = $category_doc])*
                $category = $category_value,
            )*)*
        }

        impl OutboxScope {
            /// The model field holding this scope's shard identifier (usable
            /// in constants).
            pub const fn shard_field(self) -> ::core::option::Option<&'static str> {
                match self {
                    $(Self::$scope => {
                        #[allow(unused_mut, unused_assignments)]
                        let mut field = ::core::option::Option::None;
                        $(field = ::core::option::Option::Some($shard_field);)?
                        field
                    })*
                }
            }

            /// The table whose own id is this scope's shard identifier (usable
            /// in constants).
            pub const fn owner_table(self) -> ::core::option::Option<&'static str> {
                match self {
                    $(Self::$scope => {
                        #[allow(unused_mut, unused_assignments)]
                        let mut table = ::core::option::Option::None;
                        $($(table = ::core::option::Option::Some($owner_table);)?)?
                        table
                    })*
                }
            }
        }

        /// One type per category declared with `(payload = T)`, named like
        /// the category: what typed writers and
        /// `Receivers::on_typed` take (see `outbox_core::contract`).
        #[allow(non_snake_case)]
        pub mod outbox_categories {
            $($($($($(
                #[doc = ::core::concat!(
                    "`OutboxCategory::", ::core::stringify!($category),
                    "`, typed: its payload is a `", ::core::stringify!($payload), "`."
                )]
                #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
                pub struct $category;
            )?)+)?)*)*
        }

        // Outside the module, so that the payload's path is read where the
        // registry is declared.
        $($($($($(
            impl $crate::registry::contract::TypedCategory for outbox_categories::$category {
                type Category = OutboxCategory;
                type Payload = $payload;
                const CATEGORY: OutboxCategory = OutboxCategory::$category;
            }
        )?)+)?)*)*

        $($(
            impl $crate::registry::contract::PayloadOf<{ $category_value }> for OutboxCategory {
                type Payload = <( $($($($payload,)?)+)? ) as $crate::registry::contract::PickPayload>::Payload;
            }
        )*)*

        impl OutboxCategory {
            /// The one scope this category belongs to (usable in constants).
            pub const fn scope(self) -> OutboxScope {
                match self {
                    $($(Self::$category => OutboxScope::$scope,)*)*
                }
            }
        }

        impl $crate::Scope for OutboxScope {
            const ALL: &'static [Self] = &[$(Self::$scope),*];
            fn value(self) -> i32 {
                self as i32
            }
            fn name(self) -> &'static str {
                match self {
                    $(Self::$scope => stringify!($scope),)*
                }
            }
            fn shard_field(self) -> ::core::option::Option<&'static str> {
                OutboxScope::shard_field(self)
            }
            fn owner_table(self) -> ::core::option::Option<&'static str> {
                OutboxScope::owner_table(self)
            }
        }

        impl ::core::convert::TryFrom<i32> for OutboxScope {
            type Error = $crate::UnknownScope;
            fn try_from(value: i32) -> ::core::result::Result<Self, Self::Error> {
                $(if value == $scope_value {
                    return ::core::result::Result::Ok(Self::$scope);
                })*
                ::core::result::Result::Err($crate::UnknownScope(value))
            }
        }

        impl ::core::convert::From<OutboxScope> for i32 {
            fn from(scope: OutboxScope) -> i32 {
                scope as i32
            }
        }

        impl ::core::fmt::Display for OutboxScope {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str($crate::Scope::name(*self))
            }
        }

        impl $crate::Category for OutboxCategory {
            type Scope = OutboxScope;
            const ALL: &'static [Self] = &[$($(Self::$category),*),*];
            fn value(self) -> i32 {
                self as i32
            }
            fn name(self) -> &'static str {
                match self {
                    $($(Self::$category => stringify!($category),)*)*
                }
            }
            fn scope(self) -> OutboxScope {
                OutboxCategory::scope(self)
            }
            fn is_retired(self) -> bool {
                match self {
                    $($(Self::$category => {
                        #[allow(unused_mut)]
                        let mut retired = false;
                        $($(
                            const _: () = {
                                ::core::assert!($crate::registry::check_category_flag(
                                    stringify!($flag),
                                    false $(|| $crate::registry::names_a_type::<$payload>())?,
                                ));
                            };
                            retired |= $crate::registry::str_eq(stringify!($flag), "retired");
                        )+)?
                        retired
                    })*)*
                }
            }
            fn payload_type(self) -> ::core::option::Option<&'static str> {
                match self {
                    $($(Self::$category => {
                        #[allow(unused_mut, unused_assignments)]
                        let mut payload = ::core::option::Option::None;
                        $($($(
                            payload = ::core::option::Option::Some(::core::any::type_name::<$payload>());
                        )?)+)?
                        payload
                    })*)*
                }
            }
            fn contract(self) -> ::core::option::Option<$crate::registry::contract::ContractInfo> {
                match self {
                    $($(Self::$category => {
                        #[allow(unused_mut, unused_assignments)]
                        let mut contract = ::core::option::Option::None;
                        $($($(
                            contract = ::core::option::Option::Some(
                                $crate::registry::contract::ContractInfo::of::<$payload>(),
                            );
                        )?)+)?
                        contract
                    })*)*
                }
            }
            fn payload_version(self) -> ::core::option::Option<u32> {
                match self {
                    $($(Self::$category => {
                        #[allow(unused_mut, unused_assignments)]
                        let mut version = ::core::option::Option::None;
                        $($($(
                            version = ::core::option::Option::Some(<$payload as $crate::registry::contract::Contract>::VERSION);
                        )?)+)?
                        version
                    })*)*
                }
            }
            fn coalesces(self) -> bool {
                match self {
                    $($(Self::$category => {
                        #[allow(unused_mut)]
                        let mut coalesces = true;
                        $($(
                            coalesces &= !$crate::registry::str_eq(stringify!($flag), "no_coalesce");
                        )+)?
                        coalesces
                    })*)*
                }
            }
        }

        impl ::core::convert::TryFrom<i32> for OutboxCategory {
            type Error = $crate::UnknownCategory;
            fn try_from(value: i32) -> ::core::result::Result<Self, Self::Error> {
                $($(if value == $category_value {
                    return ::core::result::Result::Ok(Self::$category);
                })*)*
                ::core::result::Result::Err($crate::UnknownCategory(value))
            }
        }

        impl ::core::fmt::Display for OutboxCategory {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str($crate::Category::name(*self))
            }
        }
    };
}

/// Picks the field that holds a model's shard identifier, at compile time:
/// the primary key when the model's table owns the scope's shards (an
/// organization is its own shard), else the scope's declared shard field.
/// Returns its index in `fields`; a missing field fails the build with a
/// message naming the attribute to add. Used by the replicated-model derives.
pub const fn infer_shard_field(
    shard_field: Option<&str>,
    owner_table: Option<&str>,
    table: &str,
    primary_key: &str,
    fields: &[&str],
) -> usize {
    let wanted = match owner_table {
        Some(owner) if str_eq(owner, table) => primary_key,
        _ => match shard_field {
            Some(field) => field,
            None => panic!(
                "cannot infer the shard identifier: the category's scope declares no \
                 shard_field; add #[outbox(shard = <field>)] naming the field that holds it"
            ),
        },
    };
    let mut i = 0;
    while i < fields.len() {
        if str_eq(fields[i], wanted) {
            return i;
        }
        i += 1;
    }
    panic!(
        "cannot infer the shard identifier: this model has no integer field named like the \
         scope's shard_field; add #[outbox(shard = <field>)] naming the field that holds it"
    )
}

/// String equality usable in constants.
pub const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}
