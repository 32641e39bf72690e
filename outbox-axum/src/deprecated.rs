//! Deprecated names, kept until 0.2, each naming its successor.

#![allow(missing_docs)]

use outbox_core::Category;

use crate::worker::OutboxWorkerBuilder;

impl<C: Category> OutboxWorkerBuilder<C> {
    #[deprecated(
        since = "0.1.1",
        note = "use `rounds_in_flight`: rounds of one kind in flight at once (default 4)"
    )]
    #[doc(hidden)]
    pub fn loops_per_kind(self, loops: usize) -> Self {
        self.rounds_in_flight(loops)
    }
}

#[deprecated(
    since = "0.1.1",
    note = "use `outbox_core::worker::Waker`; a worker's is `handle.waker()`"
)]
#[doc(hidden)]
pub type OutboxWaker = outbox_core::worker::Waker;
