//! The times a row's `scheduled_for` takes besides a real one: due at once,
//! paused, quarantined. Stores write them and compare with them; views
//! translate them (`ShardState::status`, `ShardStatus`).
//!
//! A leaf, re-exported by [`crate::store`]: the store, the drain, the
//! runtime controls and the memory store all use it.

use chrono::{DateTime, TimeZone, Utc};

/// The `scheduled_for` of a row that is due at once: `2016-08-01`, a time
/// every clock has passed, so a new row is due whatever the clocks of the
/// processes that drain it (as Sentry does). New rows get it, and so do rows
/// made due again (a recovered shard, a resumed pause, a retry).
pub fn due_at_once() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2016, 8, 1, 0, 0, 0)
        .single()
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The `retry_at` of a shard parked by an operator's pause (and the
/// `scheduled_for` of its rows): 9998-01-01, a time no clock reaches and
/// before [`quarantined_until`]. Resuming the pause releases it (see
/// [`crate::control`]).
pub fn paused_until() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(9998, 1, 1, 0, 0, 0)
        .single()
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// The `retry_at` of a quarantined shard (and the `scheduled_for` of its
/// rows): 9999-01-01, a time no clock reaches. A receiver's
/// [`permanent`](crate::permanent) error quarantines its shard unless the
/// scope dead-letters; `StoreAdmin::retry_now` releases it.
pub fn quarantined_until() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(9999, 1, 1, 0, 0, 0)
        .single()
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}
