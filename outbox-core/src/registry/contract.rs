//! Message contracts: a payload type per category, with a version that
//! survives a rolling deploy.
//!
//! Silos deploy at different times: a producer may write next week's
//! payload while a receiver still runs last week's code. A category
//! declared with `(payload = T)` in [`registry!`](crate::registry!) ties
//! the category to `T`, a [`Contract`]:
//!
//! - writers of the category take a `T` (the compiler refuses another
//!   type), and each row records `T`'s [`VERSION`](Contract::VERSION);
//! - a receiver registered with
//!   [`Receivers::on_typed`](crate::Receivers::on_typed) gets the payload
//!   already decoded into its own `T`, and accepts the versions its `T`
//!   knows: its own, and the older ones it upcasts from
//!   ([`Contract::older`], built from `From` impls);
//! - a message of a version the receiver does not know (a producer ahead
//!   of it) is not a failure: its shard is *parked*
//!   ([`UnknownVersion`]), without backoff and without dead-lettering,
//!   and delivers on its own once a binary that knows the version takes
//!   the shard.
//!
//! A row written without a version (by an untyped writer, or a binary
//! from before versions) is read as version 1: the first contract of a
//! category that had untyped payloads describes what they held.
//!
//! ```
//! use outbox_core::contract::{Contract, Upcasts};
//!
//! #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
//! pub struct OrganizationV1 { pub name: String }
//!
//! #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
//! pub struct OrganizationV2 { pub name: String, pub slug: String }
//!
//! impl Contract for OrganizationV1 {
//!     const VERSION: u32 = 1;
//! }
//!
//! impl From<OrganizationV1> for OrganizationV2 {
//!     fn from(v1: OrganizationV1) -> Self {
//!         let slug = v1.name.to_lowercase();
//!         Self { name: v1.name, slug }
//!     }
//! }
//!
//! impl Contract for OrganizationV2 {
//!     const VERSION: u32 = 2;
//!     fn older() -> Upcasts<Self> {
//!         Upcasts::from::<OrganizationV1>()
//!     }
//! }
//!
//! assert_eq!(outbox_core::contract::known_versions::<OrganizationV2>(), vec![1, 2]);
//! ```

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::Category;
use crate::payload::Payload;

/// A payload type with a version: what a typed category carries (see the
/// [module](self)).
///
/// Its JSON Schema ([`JsonSchema`](schemars::JsonSchema), derived with
/// `#[derive(schemars::JsonSchema)]`; `outbox_core::schemars` re-exports
/// the crate) is what the registry's AsyncAPI document
/// ([`crate::asyncapi`]) publishes for the category.
pub trait Contract: Serialize + DeserializeOwned + schemars::JsonSchema + Send + 'static {
    /// This type's version, 1 for a category's first. Raise it when the
    /// JSON shape changes in a way that an older receiver cannot read, and
    /// list the previous type in [`older`](Self::older).
    const VERSION: u32;

    /// The older versions a receiver of this type accepts, each decoded
    /// as its own type and upcast to this one. None by default.
    fn older() -> Upcasts<Self> {
        Upcasts::none()
    }
}

type Decode<T> = Arc<dyn Fn(&Payload) -> Result<T, serde_json::Error> + Send + Sync>;

/// One older version of an [`Upcasts`]: its number, type, schema and
/// decoder.
struct Step<T> {
    version: u32,
    type_name: &'static str,
    schema: fn() -> serde_json::Value,
    decode: Decode<T>,
}

/// The JSON Schema of `T`, as a JSON value.
fn schema_of<T: schemars::JsonSchema>() -> serde_json::Value {
    schemars::schema_for!(T).to_value()
}

/// The older versions of a [`Contract`] and how each becomes the current
/// type: built from `From` impls, with
/// [`from::<Older>()`](Self::from), which brings `Older`'s own older
/// versions along (a chain V1 → V2 → V3 needs only `From<V2> for V3` and
/// `From<V1> for V2`).
pub struct Upcasts<T> {
    steps: Vec<Step<T>>,
}

impl<T> fmt::Debug for Upcasts<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.steps.iter().map(|step| (step.version, step.type_name)))
            .finish()
    }
}

impl<T: Contract> Upcasts<T> {
    /// No older version.
    pub fn none() -> Self {
        Self { steps: Vec::new() }
    }

    /// `Older`'s version and its own older ones, each upcast through
    /// `From<Older>`.
    pub fn from<Older>() -> Self
    where
        Older: Contract,
        T: From<Older>,
    {
        Self::none().and::<Older>()
    }

    /// These and `Older`'s (see [`from`](Self::from)): for a type that
    /// upcasts from two older types directly.
    pub fn and<Older>(mut self) -> Self
    where
        Older: Contract,
        T: From<Older>,
    {
        self.steps.push(Step {
            version: Older::VERSION,
            type_name: std::any::type_name::<Older>(),
            schema: schema_of::<Older>,
            decode: Arc::new(|payload: &Payload| payload.deserialize::<Older>().map(T::from)),
        });
        for step in Older::older().steps {
            let decode = step.decode;
            self.steps.push(Step {
                version: step.version,
                type_name: step.type_name,
                schema: step.schema,
                decode: Arc::new(move |payload: &Payload| decode(payload).map(T::from)),
            });
        }
        self
    }
}

/// The versions a receiver of `T` accepts, ascending: `T`'s own and its
/// older ones.
pub fn known_versions<T: Contract>() -> Vec<u32> {
    Decoder::<T>::new().versions.to_vec()
}

/// Decodes payloads of any version `T` knows into `T`: built once per
/// typed receiver.
pub(crate) struct Decoder<T> {
    steps: Vec<Step<T>>,
    versions: Arc<[u32]>,
}

impl<T: Contract> Decoder<T> {
    pub(crate) fn new() -> Self {
        let mut steps = T::older().steps;
        // The first declaration of a version wins; an older type that
        // claims the current version is a mistake the version list shows.
        steps.retain(|step| step.version != T::VERSION);
        let mut versions: Vec<u32> = steps.iter().map(|step| step.version).collect();
        versions.push(T::VERSION);
        versions.sort_unstable();
        versions.dedup();
        Self {
            steps,
            versions: versions.into(),
        }
    }

    /// The versions it accepts, ascending.
    pub(crate) fn versions(&self) -> &Arc<[u32]> {
        &self.versions
    }

    /// The Rust type a payload of `version` is decoded as.
    pub(crate) fn type_of(&self, version: u32) -> Option<&'static str> {
        if version == T::VERSION {
            return Some(std::any::type_name::<T>());
        }
        self.steps
            .iter()
            .find(|step| step.version == version)
            .map(|step| step.type_name)
    }

    /// Decodes `payload`, written as `version`: `None` when the version
    /// is not one it knows.
    pub(crate) fn decode(
        &self,
        version: u32,
        payload: &Payload,
    ) -> Option<Result<T, serde_json::Error>> {
        if version == T::VERSION {
            return Some(payload.deserialize::<T>());
        }
        self.steps
            .iter()
            .find(|step| step.version == version)
            .map(|step| (step.decode)(payload))
    }
}

/// What a typed category's contract is, for documents that describe it
/// (the AsyncAPI document, [`crate::asyncapi`]).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ContractInfo {
    /// The version this binary writes.
    pub version: u32,
    /// Every version its receivers accept, ascending: this one and the
    /// older ones it upcasts from.
    pub versions: Vec<VersionInfo>,
}

/// One version of a [`ContractInfo`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct VersionInfo {
    /// The version.
    pub version: u32,
    /// Its Rust type.
    pub type_name: &'static str,
    /// Its JSON Schema.
    pub schema: serde_json::Value,
}

impl ContractInfo {
    /// The contract of `T`: its version and every version it reads.
    pub fn of<T: Contract>() -> Self {
        let mut versions: Vec<VersionInfo> = Vec::new();
        versions.push(VersionInfo {
            version: T::VERSION,
            type_name: std::any::type_name::<T>(),
            schema: schema_of::<T>(),
        });
        for step in T::older().steps {
            if versions.iter().all(|known| known.version != step.version) {
                versions.push(VersionInfo {
                    version: step.version,
                    type_name: step.type_name,
                    schema: (step.schema)(),
                });
            }
        }
        versions.sort_by_key(|version| version.version);
        Self {
            version: T::VERSION,
            versions,
        }
    }
}

/// A category declared with `(payload = T)` in
/// [`registry!`](crate::registry!): the macro generates one such type per
/// typed category, in the module `outbox_categories` beside
/// `OutboxCategory`, named like the category.
///
/// Writers and [`Receivers::on_typed`](crate::Receivers::on_typed) take
/// it where untyped code takes the `OutboxCategory` value, so that the
/// payload's type is the one the registry declares.
pub trait TypedCategory: Copy + Send + Sync + 'static {
    /// The registry's category enum.
    type Category: Category;
    /// The payload type the registry declares.
    type Payload: Contract;
    /// The category.
    const CATEGORY: Self::Category;
}

/// The payload of a typed category as a writer stores it: JSON and the
/// contract's version.
///
/// # Errors
///
/// When `payload` does not serialize to JSON (a map with non-string keys,
/// a `Serialize` impl that fails).
pub fn encode<K: TypedCategory>(
    _category: K,
    payload: &K::Payload,
) -> Result<(serde_json::Value, u32), serde_json::Error> {
    serde_json::to_value(payload).map(|value| (value, <K::Payload as Contract>::VERSION))
}

/// The payload type of the category whose value is `CATEGORY`, for code
/// that only has the category's value (the replicated-model derives):
/// [`registry!`](crate::registry!) implements it on `OutboxCategory` for
/// every category, with `serde_json::Value` for an untyped category and
/// the declared [`Contract`] for a typed one.
///
/// ```
/// use outbox_core::contract::{Contract, PayloadOf};
///
/// #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
/// pub struct Renamed { pub name: String }
/// impl Contract for Renamed { const VERSION: u32 = 1; }
///
/// outbox_core::registry! {
///     OrganizationScope = 0 { OrganizationUpdate = 1, OrganizationRenamed = 2 (payload = Renamed) }
/// }
///
/// type Untyped = <OutboxCategory as PayloadOf<{ OutboxCategory::OrganizationUpdate as i32 }>>::Payload;
/// type Typed = <OutboxCategory as PayloadOf<{ OutboxCategory::OrganizationRenamed as i32 }>>::Payload;
/// let _: Untyped = serde_json::json!({ "any": "json" });
/// let _: Typed = Renamed { name: "Acme".into() };
/// ```
pub trait PayloadOf<const CATEGORY: i32>: Category {
    /// `serde_json::Value`, or the category's contract (both
    /// [`CategoryPayload`](crate::CategoryPayload)s).
    type Payload;
}

/// Picks a category's payload type from the `(payload = T)` its registry
/// entry may carry: `()` is untyped, `(T,)` is `T`. Used by
/// [`registry!`](crate::registry!).
#[doc(hidden)]
pub trait PickPayload {
    type Payload;
}

impl PickPayload for () {
    type Payload = serde_json::Value;
}

impl<T> PickPayload for (T,) {
    type Payload = T;
}

/// A message whose payload version the receiver does not know: a producer
/// was deployed ahead of it. Not a failure: the shard is parked (no
/// backoff, no dead letter, no attempt counted) and tried again after the
/// drain's [`park_interval`](crate::DrainConfig::park_interval), so that
/// it delivers on its own once a binary that knows the version drains it.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "outbox message of {category} has payload version {version}, and this receiver knows \
     versions {known:?}: {}",
    if known.first().is_some_and(|oldest| version < oldest) {
        format!(
            "the version is older than every one it reads (a row without a version is \
             version 1); deploy the receiver with an upcast from version {version} \
             (`Contract::older`, `Upcasts::from`): the shard is parked until then, nothing is lost"
        )
    } else {
        format!(
            "a producer was deployed ahead of it; deploy the receiver that knows version \
             {version} (the shard is parked until then, nothing is lost)"
        )
    }
)]
pub struct UnknownVersion {
    /// The category's name.
    pub category: &'static str,
    /// The version the row was written with.
    pub version: u32,
    /// The versions the receiver accepts, ascending.
    pub known: Vec<u32>,
}

crate::error_debug::debug_with_message!(UnknownVersion);

/// The version a row records, as a receiver reads it: a row without one
/// is version 1.
pub(crate) fn written_version(stored: Option<u32>) -> u32 {
    stored.unwrap_or(1)
}

/// Whether the stored `text` of a shard's last error says it is parked for
/// an unknown payload version (see [`UnknownVersion`]).
pub(crate) fn is_parked_error(text: &str) -> bool {
    text.starts_with(PARKED)
}

/// The [`UnknownVersion`] in `error`'s chain of sources, if any: a typed
/// receiver returns it for a version its type does not know, and any
/// receiver may, to park its shard.
pub fn unknown_version<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a UnknownVersion> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(unknown) = error.downcast_ref::<UnknownVersion>() {
            return Some(unknown);
        }
        next = error.source();
    }
    None
}

/// How a parked shard's error starts, as stored.
pub(crate) const PARKED: &str = "parked: ";

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema, Debug, PartialEq)]
    struct V1 {
        name: String,
    }
    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema, Debug, PartialEq)]
    struct V2 {
        name: String,
        seats: u32,
    }
    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema, Debug, PartialEq)]
    struct V3 {
        title: String,
        seats: u32,
    }
    impl Contract for V1 {
        const VERSION: u32 = 1;
    }
    impl From<V1> for V2 {
        fn from(v1: V1) -> Self {
            Self {
                name: v1.name,
                seats: 1,
            }
        }
    }
    impl Contract for V2 {
        const VERSION: u32 = 2;
        fn older() -> Upcasts<Self> {
            Upcasts::from::<V1>()
        }
    }
    impl From<V2> for V3 {
        fn from(v2: V2) -> Self {
            Self {
                title: v2.name,
                seats: v2.seats,
            }
        }
    }
    impl Contract for V3 {
        const VERSION: u32 = 3;
        fn older() -> Upcasts<Self> {
            Upcasts::from::<V2>()
        }
    }

    fn payload(json: &str) -> Payload {
        Payload::from_json(json.to_owned()).unwrap()
    }

    #[test]
    fn a_chain_of_upcasts_reaches_the_newest_type() {
        let decoder = Decoder::<V3>::new();
        assert_eq!(&decoder.versions()[..], &[1, 2, 3]);
        let v = decoder
            .decode(1, &payload(r#"{"name":"a"}"#))
            .unwrap()
            .unwrap();
        assert_eq!(
            v,
            V3 {
                title: "a".into(),
                seats: 1
            }
        );
        assert!(decoder.type_of(1).unwrap().ends_with("V1"));
        let v = decoder
            .decode(2, &payload(r#"{"name":"b","seats":4}"#))
            .unwrap()
            .unwrap();
        assert_eq!(v.seats, 4);
        let v = decoder
            .decode(3, &payload(r#"{"title":"c","seats":5}"#))
            .unwrap()
            .unwrap();
        assert_eq!(v.title, "c");
        assert!(decoder.type_of(3).unwrap().ends_with("V3"));
        // A version-2 payload read as version 3 is malformed, not upcast.
        assert!(decoder
            .decode(3, &payload(r#"{"name":"b","seats":4}"#))
            .unwrap()
            .is_err());
        // A version it does not know is not decoded at all.
        assert!(decoder
            .decode(4, &payload(r#"{"title":"c","seats":5}"#))
            .is_none());
    }

    #[test]
    fn a_type_without_older_versions_knows_its_own() {
        assert_eq!(known_versions::<V1>(), vec![1]);
        assert_eq!(known_versions::<V2>(), vec![1, 2]);
    }

    #[test]
    fn the_unknown_version_error_says_what_to_deploy() {
        let error = UnknownVersion {
            category: "OrgUpdate",
            version: 3,
            known: vec![1, 2],
        };
        let text = error.to_string();
        assert!(text.contains("OrgUpdate"), "{text}");
        assert!(text.contains("version 3"), "{text}");
        assert!(text.contains("[1, 2]"), "{text}");
        assert!(text.contains("deploy the receiver"), "{text}");
        assert!(text.contains("deployed ahead"), "{text}");
    }

    #[test]
    fn a_version_older_than_every_known_one_asks_for_an_upcast() {
        // A category typed with a first contract of version 2, and rows
        // written before (no version: 1).
        let error = UnknownVersion {
            category: "OrgUpdate",
            version: 1,
            known: vec![2],
        };
        let text = error.to_string();
        assert!(text.contains("older than every one it reads"), "{text}");
        assert!(text.contains("upcast from version 1"), "{text}");
        assert!(text.contains("deploy the receiver"), "{text}");
        assert!(!text.contains("deployed ahead"), "{text}");
    }
}
