//! Derive macros for `outbox-seaorm`.
//!
//! **Status:** `ReplicatedRegionModel` and `ReplicatedControlModel` derives are
//! being built (issue 4); this crate exports no macro yet.
