//! The conformance suite (one file per rule, in `outbox_testing::conformance`)
//! against `MemoryStore`.

#![allow(clippy::unwrap_used, missing_docs)]

use async_trait::async_trait;
use outbox_core::MemoryStore;
use outbox_testing::conformance::{Backend, NewRow, WriterTransaction};

#[derive(Clone, Default)]
struct MemoryBackend;

#[async_trait]
impl Backend for MemoryBackend {
    type Store = MemoryStore;

    async fn fresh(&self, _label: &str) -> MemoryStore {
        MemoryStore::new()
    }

    async fn write(&self, store: &MemoryStore, rows: &[NewRow]) -> Vec<i64> {
        let mut txn = store.begin();
        let ids = rows.iter().map(|row| row.write_to(&mut txn)).collect();
        txn.commit();
        ids
    }

    async fn write_rolled_back(&self, store: &MemoryStore, rows: &[NewRow]) {
        let mut txn = store.begin();
        for row in rows {
            row.write_to(&mut txn);
        }
        drop(txn);
    }

    async fn begin(&self, store: &MemoryStore) -> Box<dyn WriterTransaction> {
        Box::new(store.begin())
    }

    async fn reconnect(&self, store: &MemoryStore) -> MemoryStore {
        store.clone()
    }
}

outbox_testing::conformance_tests!(MemoryBackend);
