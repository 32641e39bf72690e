//! Three versions of one payload, each upcast from the one before: the
//! fixtures of rolling-deploy tests (a producer a version ahead of its
//! receiver), shared by the crates' tests so that they agree on the shapes.
//!
//! ```
//! use outbox_testing::contracts::{OrgV1, OrgV3};
//!
//! let v3 = OrgV3::from(outbox_testing::contracts::OrgV2::from(OrgV1 { name: "acme".into() }));
//! assert_eq!((v3.display_name.as_str(), v3.seats), ("acme", 1));
//! assert_eq!(outbox_core::contract::known_versions::<OrgV3>(), vec![1, 2, 3]);
//! ```

use outbox_core::contract::Upcasts;
use outbox_core::schemars;
use outbox_core::Contract;

/// Version 1: what untyped writers stored before the category was typed.
#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
#[schemars(crate = "outbox_core::schemars")]
pub struct OrgV1 {
    /// The organization's name.
    pub name: String,
}

/// Version 2: seats added (1 for a version-1 payload).
#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
#[schemars(crate = "outbox_core::schemars")]
pub struct OrgV2 {
    /// The organization's name.
    pub name: String,
    /// Its seats.
    pub seats: u32,
}

/// Version 3: the name renamed, which version 2's readers cannot read.
#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
#[schemars(crate = "outbox_core::schemars")]
pub struct OrgV3 {
    /// The organization's name, as shown.
    pub display_name: String,
    /// Its seats.
    pub seats: u32,
}

impl Contract for OrgV1 {
    const VERSION: u32 = 1;
}

impl From<OrgV1> for OrgV2 {
    fn from(v1: OrgV1) -> Self {
        Self {
            name: v1.name,
            seats: 1,
        }
    }
}

impl Contract for OrgV2 {
    const VERSION: u32 = 2;
    fn older() -> Upcasts<Self> {
        Upcasts::from::<OrgV1>()
    }
}

impl From<OrgV2> for OrgV3 {
    fn from(v2: OrgV2) -> Self {
        Self {
            display_name: v2.name,
            seats: v2.seats,
        }
    }
}

impl Contract for OrgV3 {
    const VERSION: u32 = 3;
    fn older() -> Upcasts<Self> {
        Upcasts::from::<OrgV2>()
    }
}
