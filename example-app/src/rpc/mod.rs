//! Cross-silo RPC: HTTP + JSON, each call signed with the calling silo's key
//! per [Standard Webhooks](https://www.standardwebhooks.com/) (the library's
//! `outbox_core::sink::webhook` signs, `outbox_axum::webhook` verifies).
//!
//! - **Who calls.** Every silo has its own key ([`keys`]): a call is signed
//!   with the caller's, and names the caller in `outbox-sender` (signed with
//!   the other delivery headers). Control verifies a region's calls with that
//!   region's key; a region knows only Control's, so it accepts calls from
//!   Control alone. [`authenticate`] refuses anything else (401).
//! - **What it may ask.** A region writes only its own rows: organization
//!   and member mappings and audit rows of its region ([`Caller`], 403
//!   otherwise); Control replicates a user to a region only where a member
//!   of that region names the user (a region stores no other).
//! - **When.** A call's timestamp must be within 5 minutes of the callee's
//!   clock (401 otherwise): a captured call cannot be replayed later.
//! - **Once.** Within the window, a replay carries the message id it was
//!   signed with: the inbox ([`apply_once`]) applies each id once. A call
//!   without a signed message id is refused (400).
//! - **Where.** The signed body is an [`Envelope`] naming the method and
//!   path: a call cannot be replayed against another route.
//! - **To whom.** The envelope names the silo the call is for, and a silo
//!   refuses (401) a call signed for another: a region cannot replay to
//!   another region a call Control sent it (Control signs them all with
//!   one key). [`RpcClient`] follows no redirects: a signed call goes to
//!   the address configured for its silo, or fails.
//! - **Rotation.** A silo's key may be two keys (`new,old`) during a
//!   rotation: it signs with both, the others accept either; once every
//!   silo has only the new key, the old one is refused.

mod authenticate;
mod client;
pub mod keys;
mod signed;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use outbox_axum::apply_once::ApplyOnce;

pub use authenticate::{authenticate, Caller, Peers, RpcRejection};
pub use client::{RpcClient, RpcError};
pub use keys::{KeyError, RpcKeys, CONTROL, MIN_KEY_LEN};
pub use signed::{now, sign_call, Envelope, SignError, SignedCall};

/// The headers that carry an outbox delivery: its message id (each RPC
/// applies a message once), and its fencing token, shard, category and
/// sender (never after a newer claim of its shard). Signed by
/// [`RpcClient`] from within a receiver, checked by every RPC route
/// through [`authenticate`] and [`apply_once`].
pub use outbox_axum::apply_once::{
    CATEGORY_HEADER, FENCE_HEADER, MESSAGE_ID_HEADER, SENDER_HEADER, SHARD_HEADER,
};

/// The inbox consumers of the RPC routes: `rpc:<caller>`.
const RPC_CONSUMER: &str = "rpc";

/// Middleware of the RPC routes (inside the outbox layer, behind
/// [`authenticate`]): the library's [`outbox_axum::apply_once`] under the
/// inbox consumer `rpc:<caller>`, one per calling silo, so that a message id
/// one silo sent never suppresses another's (a region that saw another's
/// call on the wire cannot have its id recorded first). Each outbox message
/// is applied once (its id recorded in the request's transaction); a call
/// whose fencing token is lower than one applied for the same sender and
/// shard (a worker paused past its lease) is answered 204 without running
/// the route (rule 12). [`authenticate`] lets no call without a signed
/// message id through.
pub async fn apply_once(request: Request, next: Next) -> Response {
    let Some(caller) = request.extensions().get::<Caller>() else {
        tracing::error!("an RPC route without `rpc::authenticate` outside `rpc::apply_once`");
        return crate::error::ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "internal error",
        )
        .into_response();
    };
    let consumer = format!("{RPC_CONSUMER}:{}", caller.silo());
    outbox_axum::apply_once::apply_once(State(ApplyOnce::new(consumer)), request, next).await
}
