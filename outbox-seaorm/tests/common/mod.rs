//! Shared test fixtures: a registry, a recording receiver, both backends.

#![allow(dead_code, missing_docs, clippy::unwrap_used)]

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use outbox_core::{Category, HandlerError, Message, Receivers, ShardKey};
use outbox_seaorm::testing::TestDatabase;
use sea_orm::DbBackend;

outbox_core::registry! {
    /// Organization-owned data.
    OrganizationScope = 0 (shard_field = "organization_id") {
        OrganizationUpdate = 1,
        OrganizationMemberUpdate = 2,
        LegacyPing = 3 (retired),
    }
    /// User-owned data.
    UserScope = 1 (shard_field = "user_id") {
        UserUpdate = 10,
    }
    /// One shard per event.
    AuditLogScope = 2 {
        AuditLogEvent = 20,
    }
}

/// One delivery as a receiver saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    pub shard: ShardKey,
    pub category: OutboxCategory,
    pub object: i64,
    pub id: i64,
    pub first_id: i64,
    pub coalesced: usize,
    pub payload: Option<serde_json::Value>,
    pub synchronous: bool,
}

type FailRule = Arc<dyn Fn(&Message<OutboxCategory>) -> bool + Send + Sync>;

/// A receiver that records deliveries, can fail on demand, and notices two
/// workers delivering one shard at the same time.
#[derive(Clone)]
pub struct Recorder {
    pub deliveries: Arc<Mutex<Vec<Delivery>>>,
    active: Arc<Mutex<HashSet<ShardKey>>>,
    pub overlaps: Arc<AtomicUsize>,
    fail: Arc<Mutex<Option<FailRule>>>,
    pub calls: Arc<AtomicUsize>,
    pub yield_inside: Arc<AtomicBool>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self {
            deliveries: Arc::default(),
            active: Arc::default(),
            overlaps: Arc::default(),
            fail: Arc::default(),
            calls: Arc::default(),
            yield_inside: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl Recorder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Fails every message for which `rule` is true.
    pub fn fail_when(
        &self,
        rule: impl Fn(&Message<OutboxCategory>) -> bool + Send + Sync + 'static,
    ) {
        *self.fail.lock().unwrap() = Some(Arc::new(rule));
    }

    pub fn stop_failing(&self) {
        *self.fail.lock().unwrap() = None;
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.deliveries.lock().unwrap().clone()
    }

    pub async fn handle(&self, message: Message<OutboxCategory>) -> Result<(), HandlerError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if !self.active.lock().unwrap().insert(message.shard.clone()) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        if self.yield_inside.load(Ordering::Relaxed) {
            tokio::task::yield_now().await;
        }
        let fail = self.fail.lock().unwrap().clone();
        let result = if fail.is_some_and(|rule| rule(&message)) {
            Err(format!("receiver refused {}", message.id).into())
        } else {
            self.deliveries.lock().unwrap().push(Delivery {
                shard: message.shard.clone(),
                category: message.category,
                object: message.object_identifier,
                id: message.id,
                first_id: message.first_id,
                coalesced: message.coalesced,
                payload: message.payload.clone(),
                synchronous: message.synchronous,
            });
            Ok(())
        };
        self.active.lock().unwrap().remove(&message.shard);
        result
    }

    /// Receivers for every live category, all into this recorder.
    pub fn receivers(&self) -> Receivers<OutboxCategory> {
        let mut receivers = Receivers::new();
        for &category in OutboxCategory::ALL {
            if category.is_retired() {
                continue;
            }
            let recorder = self.clone();
            receivers.register(category, move |message| {
                let recorder = recorder.clone();
                async move { recorder.handle(message).await }
            });
        }
        receivers
    }
}

pub async fn database(backend: DbBackend, label: &str) -> TestDatabase {
    TestDatabase::of(backend, label)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Generates a PostgreSQL and a SQLite test from `async fn name(backend)`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name(sea_orm::DbBackend::Postgres).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name(sea_orm::DbBackend::Sqlite).await;
                }
            )*
        }
    };
}
