//! The end of a claim's leases, as the worker that holds them sees it.
//!
//! The round renews its leases and moves their end; its delivery tasks read
//! it before every receiver call, and a task whose lease has ended by this
//! process's clock (or is about to: less than the lease margin left) calls
//! no receiver (rule 12: the sender gives up where it can). A process
//! paused past its lease resumes here first: its timers may fire in any
//! order, but no receiver is called before this check. A pause between the
//! check and the call is what the receiver's fencing token is for.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::claim::to_chrono;

/// Shared between a round and its delivery tasks. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct LeaseEnd(Arc<AtomicI64>);

impl LeaseEnd {
    pub(crate) fn new(until: DateTime<Utc>) -> Self {
        Self(Arc::new(AtomicI64::new(until.timestamp_micros())))
    }

    /// The leases now end at `until` (renewed, or found gone: then `now`).
    pub(crate) fn set(&self, until: DateTime<Utc>) {
        self.0.store(until.timestamp_micros(), Ordering::Release);
    }

    /// When the leases end.
    pub(crate) fn until(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_micros(self.0.load(Ordering::Acquire)).unwrap_or_default()
    }

    /// Whether a receiver may still be called at `now`: more than `margin`
    /// of the lease is left.
    pub(crate) fn allows_call(&self, now: DateTime<Utc>, margin: Duration) -> bool {
        now + to_chrono(margin) < self.until()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_needs_more_than_the_margin_left() {
        let start = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let lease = LeaseEnd::new(start + chrono::Duration::seconds(3));
        let margin = Duration::from_millis(500);
        assert!(lease.allows_call(start, margin));
        assert!(lease.allows_call(start + chrono::Duration::milliseconds(2_499), margin));
        assert!(!lease.allows_call(start + chrono::Duration::milliseconds(2_500), margin));
        assert!(!lease.allows_call(start + chrono::Duration::seconds(60), margin));
        // Renewed: calls may go on; found gone: none.
        lease.set(start + chrono::Duration::seconds(63));
        assert!(lease.allows_call(start + chrono::Duration::seconds(60), margin));
        lease.set(start);
        assert!(!lease.allows_call(start, margin));
    }
}
