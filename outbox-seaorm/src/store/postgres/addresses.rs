//! Where this process last wrote each claim bucket's row.
//!
//! Every claim and every release updates a bucket's row, and while vacuum's
//! horizon is held back (a long transaction, a `pg_dump`, a lagging replica
//! slot) none of the versions these updates leave can be removed: a read of
//! the row through its key visits every one of them, thousands per bucket
//! after a few minutes at a few thousand messages a second, and the claims'
//! cost grows with the pin's age. The statement that wrote a version knows
//! where it put it (`ctid`, returned by `RETURNING`), and the next statement
//! of this process that needs the row reads it there first: a TID scan, one
//! read whatever the versions behind it.
//!
//! An address is a hint, never trusted: a statement reads at it only the
//! version its snapshot sees, with the same tests the key path applies
//! (kind, bucket, version or token), and reads through the key every bucket
//! its address did not lead to (another process or statement wrote the row
//! since; vacuum, once it can, moved things). So a stale, missing or
//! reused address costs one read more, and nothing else.
//!
//! An address is kept as `block × 65536 + offset` (0: not known). The
//! statements take it in that form (`format('(%s,%s)', a / 65536, a %
//! 65536)::tid`, for the buckets they read only) and return `ctid::text`
//! (`(block,offset)`), parsed here by [`parse`]: computing the number in
//! SQL (`(ctid::text::point)[0] * 65536 + …`, through the `point` type's
//! float parsing) costs the server time for every bucket leased or
//! released (measured: `cargo bench -p outbox-seaorm --bench drain`).

use std::sync::atomic::{AtomicI64, Ordering};

use outbox_core::shard::CLAIM_BUCKETS;
use outbox_core::OutboxKind;

/// The last known address of each bucket's row, per kind; shared by a
/// store's clones (lock-free: a lost update only costs a read through the
/// key).
#[derive(Debug)]
pub(super) struct Addresses {
    region: Box<[AtomicI64]>,
    control: Box<[AtomicI64]>,
}

impl Default for Addresses {
    fn default() -> Self {
        let slots = || (0..CLAIM_BUCKETS).map(|_| AtomicI64::new(0)).collect();
        Self {
            region: slots(),
            control: slots(),
        }
    }
}

impl Addresses {
    fn slots(&self, kind: OutboxKind) -> &[AtomicI64] {
        match kind {
            OutboxKind::Region => &self.region,
            OutboxKind::Control => &self.control,
        }
    }

    fn slot(&self, kind: OutboxKind, bucket: i32) -> Option<&AtomicI64> {
        usize::try_from(bucket)
            .ok()
            .and_then(|at| self.slots(kind).get(at))
    }

    /// Every bucket's address, by bucket (a claim reads any of them).
    pub(super) fn all(&self, kind: OutboxKind) -> Vec<i64> {
        self.slots(kind)
            .iter()
            .map(|slot| slot.load(Ordering::Relaxed))
            .collect()
    }

    /// The addresses of `buckets`, in their order.
    pub(super) fn of(&self, kind: OutboxKind, buckets: &[i32]) -> Vec<i64> {
        buckets
            .iter()
            .map(|&bucket| {
                self.slot(kind, bucket)
                    .map_or(0, |slot| slot.load(Ordering::Relaxed))
            })
            .collect()
    }

    /// Remembers where a statement of this process wrote `bucket`'s row.
    pub(super) fn record(&self, kind: OutboxKind, bucket: i32, address: i64) {
        if let Some(slot) = self.slot(kind, bucket) {
            slot.store(address.max(0), Ordering::Relaxed);
        }
    }

    /// Remembers where a statement wrote the rows of `buckets`, the
    /// addresses in the same order.
    pub(super) fn record_all(&self, kind: OutboxKind, buckets: &[i32], addresses: &[i64]) {
        for (&bucket, &address) in buckets.iter().zip(addresses) {
            self.record(kind, bucket, address);
        }
    }
}

/// The address in a `tid`'s text (`(block,offset)`), 0 (not known) for
/// anything else: an address is only a hint.
pub(super) fn parse(tid: &str) -> i64 {
    let pair = tid
        .strip_prefix('(')
        .and_then(|rest| rest.strip_suffix(')'))
        .and_then(|rest| rest.split_once(','));
    match pair {
        Some((block, offset)) => match (block.parse::<i64>(), offset.parse::<i64>()) {
            (Ok(block), Ok(offset)) if (0..65_536).contains(&offset) && block >= 0 => {
                block.saturating_mul(65_536).saturating_add(offset)
            }
            _ => 0,
        },
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_come_back_as_tid_text() {
        assert_eq!(parse("(1,1)"), 65_537);
        assert_eq!(parse("(0,7)"), 7);
        assert_eq!(parse("(4294967295,65535)"), 4_294_967_295 * 65_536 + 65_535);
        for malformed in ["", "(1,2", "1,2)", "(a,1)", "(1,65536)", "(-1,1)", "(1)"] {
            assert_eq!(parse(malformed), 0, "{malformed}");
        }
    }

    #[test]
    fn addresses_are_kept_per_kind_and_bucket_and_unknown_ones_are_zero() {
        let addresses = Addresses::default();
        assert_eq!(
            addresses.all(OutboxKind::Region).len(),
            CLAIM_BUCKETS as usize
        );
        addresses.record_all(OutboxKind::Region, &[3, 1023], &[65_537, 7]);
        addresses.record(OutboxKind::Control, 3, 9);
        assert_eq!(
            addresses.of(OutboxKind::Region, &[1023, 3, 4]),
            vec![7, 65_537, 0]
        );
        assert_eq!(addresses.of(OutboxKind::Control, &[3]), vec![9]);
        assert_eq!(addresses.all(OutboxKind::Region)[3], 65_537);
        // Out of range: ignored when recorded, unknown when asked.
        addresses.record(OutboxKind::Region, CLAIM_BUCKETS, 5);
        addresses.record(OutboxKind::Region, -1, 5);
        assert_eq!(
            addresses.of(OutboxKind::Region, &[CLAIM_BUCKETS, -1]),
            vec![0, 0]
        );
    }
}
