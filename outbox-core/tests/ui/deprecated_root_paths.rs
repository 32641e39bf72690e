#![deny(deprecated)]

use outbox_core::CommitBatch;

fn main() {
    let _ = outbox_core::the_past();
    let _ = outbox_core::CLAIM_BUCKETS;
    let _: Option<CommitBatch> = None;
}
