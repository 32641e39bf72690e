//! # example-app
//!
//! A small hybrid-cloud service on the outbox: one Control silo and two
//! Region silos (`us`, `de`), each an Axum server with its own database, its
//! own `OutboxLayer` and its own background drain, talking HTTP + JSON RPC
//! signed with each silo's own key (Standard Webhooks, `rpc`).
//!
//! - Region → Control: organizations (`OrganizationUpdate`, region model) become
//!   Control's organization mappings; memberships (`OrganizationMemberUpdate`)
//!   become member mappings; audit events (`AuditLogEvent`, one shard per event)
//!   become Control's audit log.
//! - Control → Regions: users (`UserUpdate`, control model) are replicated to
//!   every region where they are a member.
//!
//! [`silo::start`] runs one silo on a listener; `main.rs` runs all three (or
//! one) from the command line; the end-to-end tests start them on ephemeral
//! ports.

pub mod admin_token;
pub mod api_auth;
pub mod contracts;
pub mod control;
pub mod error;
pub mod extract;
pub mod ids;
pub mod limits;
pub mod migrations;
pub mod region;
pub mod registry;
pub mod rpc;
pub mod serve;
pub mod silo;
pub mod telemetry;
pub mod upgrade;
pub mod validate;

/// The workspace README's code blocks, compiled and run as doctests of this
/// crate, which depends on every library crate and is not published: the
/// README sits outside every published crate's folder.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
