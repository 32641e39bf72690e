//! Rule 11 on PostgreSQL: the rows of one shard commit in id order.
//!
//! Ids come from a sequence when a row is written, not when it commits: two
//! transactions writing one shard at once could otherwise commit in the
//! other order, and the drain (or a flush) deliver the higher id before the
//! lower one exists. The insert statement of a write therefore takes a
//! transaction-level advisory lock per shard it writes, before it draws
//! its ids (the rows are selected from their `VALUES` under a one-time
//! filter that takes the locks, and each id is drawn by the column default
//! as its row comes, after the filter): a second writer of the shard waits,
//! in its insert, for the first one's commit or rollback, and draws higher
//! ids after it. Writers
//! of different shards never wait for each other (up to the rare collision
//! of two shards' 32-bit keys, which only makes them wait).
//!
//! What it costs: one shard's writers commit one after the other from their
//! outbox insert on, so a hot shard's write rate is bounded by one commit
//! at a time (measured by the `commit_order` bench). Locks of one call are taken in key
//! order; a transaction that writes shard A, then (in a later call) shard
//! B, while another writes B then A, can deadlock: PostgreSQL ends one of
//! them after `deadlock_timeout` with an error (SQLSTATE 40P01), and its
//! request fails and rolls back (retry it). Writing every shard of a
//! transaction in one call (`write_region_many`) avoids it.
//!
//! The keys use the two-integer form of the advisory locks (a key space of
//! its own, apart from the one-`bigint` form applications often use), with
//! a class per outbox table. The hash must stay the same across versions:
//! processes of two versions write at once during a deploy.

use outbox_core::OutboxKind;

/// The first key of a shard's lock: one class per outbox table ("OB" and
/// the kind).
pub(super) fn class(kind: OutboxKind) -> i32 {
    0x4F42_0000
        | match kind {
            OutboxKind::Region => 1,
            OutboxKind::Control => 2,
        }
}

/// The second keys of the shards given as (region, scope, identifier):
/// distinct, in the order the locks are taken.
pub(super) fn keys<'a>(
    kind: OutboxKind,
    shards: impl IntoIterator<Item = (Option<&'a str>, i32, i64)>,
) -> Vec<i32> {
    let mut keys: Vec<i32> = shards
        .into_iter()
        .map(|(region, scope, identifier)| key(kind, region, scope, identifier))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// FNV-1a (32 bits) of the shard: its kind, region, scope and identifier.
fn key(kind: OutboxKind, region: Option<&str>, scope: i32, identifier: i64) -> i32 {
    const OFFSET: u32 = 0x811C_9DC5;
    const PRIME: u32 = 0x0100_0193;
    let mut hash = OFFSET;
    let mut feed = |bytes: &[u8]| {
        for byte in bytes {
            hash ^= u32::from(*byte);
            hash = hash.wrapping_mul(PRIME);
        }
    };
    feed(&[class(kind).to_le_bytes()[0]]);
    feed(region.unwrap_or("").as_bytes());
    feed(&[0xFF]);
    feed(&scope.to_le_bytes());
    feed(&identifier.to_le_bytes());
    i32::from_le_bytes(hash.to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_across_versions() {
        // Processes of two versions lock the same shard with the same key:
        // these values must never change.
        assert_eq!(key(OutboxKind::Region, None, 0, 7), -827_792_546);
        assert_eq!(key(OutboxKind::Control, Some("us"), 0, 7), 234_570_773);
    }

    #[test]
    fn a_calls_keys_are_distinct_and_sorted() {
        let keys = keys(
            OutboxKind::Region,
            [(None, 0, 9), (None, 0, 7), (None, 0, 9), (None, 1, 7)],
        );
        assert_eq!(keys.len(), 3);
        assert!(keys.windows(2).all(|pair| pair[0] < pair[1]));
    }

    #[test]
    fn regions_and_kinds_are_kept_apart() {
        let region = key(OutboxKind::Region, None, 0, 7);
        assert_ne!(region, key(OutboxKind::Control, None, 0, 7));
        assert_ne!(
            key(OutboxKind::Control, Some("us"), 0, 7),
            key(OutboxKind::Control, Some("eu"), 0, 7)
        );
    }
}
