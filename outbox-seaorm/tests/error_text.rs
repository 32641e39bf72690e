//! A receiver's error text is stored whatever it holds (issue 26, item 5):
//! a NUL character (which PostgreSQL's `text` refuses) and text that was
//! invalid UTF-8, converted lossily. The shard backs off as usual, its
//! attempts and next try recorded, and delivers once the receiver succeeds:
//! the error cannot make the commit fail and the round loop.

#![allow(missing_docs, clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};

use common::{database, OutboxCategory, OutboxScope};
use outbox_core::store::StoreAdmin;
use outbox_core::{
    Clock, DrainConfig, Drainer, HandlerError, ManualClock, Message, OutboxKind, Receivers,
    ShardKey,
};
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId};
use outbox_testing::database::DbBackend;

/// A receiver that fails with the script's text while it holds one.
fn receivers(script: &Arc<Mutex<Option<String>>>) -> Receivers<OutboxCategory> {
    let script = script.clone();
    Receivers::new()
        .on(
            OutboxCategory::OrganizationUpdate,
            move |_: Message<OutboxCategory>| {
                let result = match script.lock().unwrap().clone() {
                    Some(text) => Err(HandlerError::from(text)),
                    None => Ok(()),
                };
                async move { result }
            },
        )
        .discard(OutboxCategory::OrganizationMemberUpdate)
        .discard(OutboxCategory::UserUpdate)
        .discard(OutboxCategory::AuditLogEvent)
}

/// Texts a receiver may fail with: a NUL in the middle, bytes that were
/// not UTF-8 (a peer's body read with `from_utf8_lossy`), and both at the
/// end of a text longer than what is kept.
fn hostile_texts() -> Vec<String> {
    let lossy = String::from_utf8_lossy(b"peer said \xff\xfe\x00 then \xc3").into_owned();
    vec![
        "bad\0thing".to_owned(),
        lossy,
        format!("{}\0\u{fffd}", "x".repeat(5_000)),
    ]
}

async fn an_error_with_a_nul_or_lossy_bytes_backs_off_and_delivers_later(backend: DbBackend) {
    let t = database(backend, "error_text").await;
    let store = t.store();
    let clock = ManualClock::starting_now();
    let script = Arc::new(Mutex::new(None));
    let drainer = Drainer::builder(store.clone(), receivers(&script))
        .config(DrainConfig::default().recovery_batch(0))
        .clock(clock.clone())
        .build();
    let shard = ShardKey::region(OutboxScope::OrganizationScope, 1);
    write_region(
        &t.db,
        OutboxMessage::new(OutboxCategory::OrganizationUpdate, ShardId(1), ObjectId(1)),
    )
    .await
    .unwrap();

    let texts = hostile_texts();
    for (attempt, text) in texts.iter().enumerate() {
        *script.lock().unwrap() = Some(text.clone());
        let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
        assert_eq!(report.failures.len(), 1, "{report:?}");
        assert!(report.lost_claims.is_empty(), "{report:?}");
        let failing = store.failing_shards(OutboxKind::Region, 10).await.unwrap();
        assert_eq!(failing.len(), 1, "the state was written");
        let state = &failing[0].state;
        assert_eq!(failing[0].shard, shard);
        assert_eq!(state.attempts, u32::try_from(attempt + 1).unwrap());
        assert!(state.retry_at > clock.now(), "{state:?}");
        assert!(!state.is_quarantined());
        let stored = state.last_error.clone().unwrap_or_default();
        assert!(!stored.contains('\0'), "{stored:?}");
        assert!(stored.contains("receiver failed"), "{stored:?}");
        // Not due before its backoff; due after it.
        assert_eq!(
            drainer
                .drain_due(OutboxKind::Region)
                .await
                .unwrap()
                .deliveries,
            0
        );
        clock.advance((state.retry_at - clock.now()).to_std().unwrap());
    }
    *script.lock().unwrap() = None;
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 1, "{report:?}");
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
    assert!(store
        .failing_shards(OutboxKind::Region, 10)
        .await
        .unwrap()
        .is_empty());
}

async fn an_error_with_a_nul_is_dead_lettered_where_the_scope_allows(backend: DbBackend) {
    let t = database(backend, "error_text_dead").await;
    let store = t.store();
    let script = Arc::new(Mutex::new(Some("refused\0here".to_owned())));
    let drainer = Drainer::builder(store.clone(), receivers(&script))
        .dead_letter(OutboxScope::OrganizationScope, 1)
        .build();
    write_region(
        &t.db,
        OutboxMessage::new(OutboxCategory::OrganizationUpdate, ShardId(2), ObjectId(2)),
    )
    .await
    .unwrap();
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.dead_lettered, 1, "{report:?}");
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
    let dead = store.dead_letters(OutboxKind::Region, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert!(!dead[0].error.contains('\0'), "{:?}", dead[0].error);
}

outbox_testing::on_both_backends!(
    an_error_with_a_nul_or_lossy_bytes_backs_off_and_delivers_later,
    an_error_with_a_nul_is_dead_lettered_where_the_scope_allows,
);
