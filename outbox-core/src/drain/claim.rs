//! Building a claim: its lease, its fencing token, its size.

use std::time::Duration;

use super::engine::Engine;
use crate::registry::Category;
use crate::shard::OutboxKind;
use crate::store::{ClaimOrder, ClaimRequest};

impl<C: Category> Engine<C> {
    /// A claim of `rows` rows of `kind` at most (up to `up_to_id`), leased
    /// from now for the configured lease under a new token.
    pub(crate) fn claim_request(
        &self,
        kind: OutboxKind,
        rows: usize,
        up_to_id: Option<i64>,
    ) -> ClaimRequest {
        let now = self.now();
        ClaimRequest {
            kind,
            now,
            lease_until: now + to_chrono(self.config().lease),
            token: new_token(),
            owner: self.owner().to_owned(),
            rows,
            up_to_id,
            order: ClaimOrder::Oldest,
            beyond: 0,
            shard_rows: usize::MAX,
            held_rows: 0,
        }
    }
}

/// Converts a std duration, saturating at chrono's maximum.
pub(crate) fn to_chrono(duration: Duration) -> chrono::Duration {
    chrono::Duration::from_std(duration).unwrap_or(chrono::Duration::MAX)
}

/// A random, non-zero fencing token.
fn new_token() -> i64 {
    loop {
        let token = rand::random::<i64>() & i64::MAX;
        if token != 0 {
            return token;
        }
    }
}
