//! A receiver that asks for a delay (`outbox_core::retry_after`: a peer's
//! `429` with `Retry-After`) holds its shard at least that long, up to the
//! backoff's cap; other errors back off as before.

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::store::StoreAdmin;
use outbox_core::{
    retry_after, BackoffPolicy, Clock, DrainConfig, Drainer, HandlerError, ManualClock,
    MemoryStore, Message, OutboxKind, Receivers, ShardKey,
};

outbox_core::registry! {
    OrgScope = 0 (shard_field = "organization_id") {
        OrgUpdate = 1,
    }
}

/// Fails every delivery with what `next` holds then; `None`: succeeds.
type Script = Arc<Mutex<Option<Box<dyn Fn() -> HandlerError + Send>>>>;

fn receivers(script: &Script) -> Receivers<OutboxCategory> {
    let script = script.clone();
    Receivers::new().on(
        OutboxCategory::OrgUpdate,
        move |_: Message<OutboxCategory>| {
            let result = match script.lock().unwrap().as_ref() {
                Some(error) => Err(error()),
                None => Ok(()),
            };
            async move { result }
        },
    )
}

/// How long the shard waits after one failure with `error`, with the
/// default backoff (1 s doubling up to 1 h) after `earlier` failures of
/// the plain kind.
async fn delay_after(earlier: usize, error: fn() -> HandlerError) -> Duration {
    let clock = ManualClock::starting_now();
    let store = MemoryStore::new().with_clock(clock.clone());
    let shard = ShardKey::region(OutboxScope::OrgScope, 1);
    store.write(&shard, OutboxCategory::OrgUpdate, 1, None);
    let script: Script = Arc::new(Mutex::new(Some(Box::new(|| "plain failure".into()))));
    let drainer = Drainer::builder(store.clone(), receivers(&script))
        .config(DrainConfig::default().recovery_batch(0))
        .clock(clock.clone())
        .build();
    for _ in 0..earlier {
        let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
        assert_eq!(report.failures.len(), 1);
        let state = store.failing_shards(OutboxKind::Region, 10).await.unwrap();
        clock.advance((state[0].state.retry_at - clock.now()).to_std().unwrap());
    }
    *script.lock().unwrap() = Some(Box::new(error));
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.failures.len(), 1, "{report:?}");
    let failure = &report.failures[0];
    let waited = (failure.retry_at - clock.now()).to_std().unwrap();

    // The shard is not tried before then, and is right after.
    clock.advance(waited - Duration::from_millis(1));
    *script.lock().unwrap() = None;
    assert_eq!(
        drainer
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .deliveries,
        0
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        drainer
            .drain_due(OutboxKind::Region)
            .await
            .unwrap()
            .deliveries,
        1
    );
    waited
}

#[tokio::test]
async fn a_receiver_that_asks_for_a_delay_is_left_alone_that_long() {
    let waited = delay_after(0, || {
        retry_after("429 Too Many Requests", Duration::from_secs(120))
    })
    .await;
    assert_eq!(waited, Duration::from_secs(120));
}

#[tokio::test]
async fn the_delay_asked_for_is_found_under_other_errors() {
    #[derive(Debug, thiserror::Error)]
    #[error("the call failed")]
    struct Wrapping(#[source] HandlerError);
    let waited = delay_after(0, || {
        Box::new(Wrapping(retry_after(
            "rate limited",
            Duration::from_secs(30),
        )))
    })
    .await;
    assert_eq!(waited, Duration::from_secs(30));
}

#[tokio::test]
async fn a_shorter_delay_than_the_backoff_keeps_the_backoff() {
    // After two plain failures (1 s, 2 s), the next backoff is 4 s.
    assert_eq!(
        delay_after(2, || "plain".into()).await,
        Duration::from_secs(4)
    );
    assert_eq!(
        delay_after(2, || retry_after("busy", Duration::from_secs(1))).await,
        Duration::from_secs(4)
    );
}

#[tokio::test]
async fn a_delay_beyond_the_cap_waits_the_cap() {
    let cap = BackoffPolicy::default().max();
    let waited = delay_after(0, || {
        retry_after("come back tomorrow", Duration::from_secs(86_400))
    })
    .await;
    assert_eq!(waited, cap);
}
