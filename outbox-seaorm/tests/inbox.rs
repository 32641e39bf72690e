//! The inbox on PostgreSQL and SQLite: a change applied through it is
//! applied once across a process that crashes between the receiver's commit
//! and the outbox delete; a failed change records nothing; consumers are
//! kept apart; rows are pruned after their retention; on PostgreSQL, a
//! concurrent transaction recording the same id waits for the first one's
//! outcome.

#![allow(clippy::unwrap_used, missing_docs)]

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use outbox_core::store::StoreAdmin;
use outbox_core::uuid::Uuid;
use outbox_core::{Drainer, HandlerError, ManualClock, Message, OutboxKind, Receivers};
use outbox_seaorm::inbox::{self, Applied, Fence, FenceKey, Inbox, InboxError, Received};
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, SeaOrmStore, ShardId};
use outbox_testing::conformance::OutboxCategory;
use outbox_testing::database::{connect, DbBackend, TestDatabase};
use sea_orm::{ConnectionTrait, DbErr, Statement, TransactionTrait};

const CHILD_DB: &str = "OUTBOX_INBOX_CHILD_DB";
const CONSUMER: &str = "stock-counter";

async fn create_stock(t: &TestDatabase) {
    t.db.execute_unprepared("CREATE TABLE stock (id bigint PRIMARY KEY, updates bigint NOT NULL)")
        .await
        .unwrap();
    t.db.execute_unprepared("INSERT INTO stock (id, updates) VALUES (1, 0)")
        .await
        .unwrap();
}

async fn updates(db: &impl ConnectionTrait) -> i64 {
    let backend = db.get_database_backend();
    db.query_one_raw(Statement::from_string(
        backend,
        "SELECT updates FROM stock WHERE id = 1",
    ))
    .await
    .unwrap()
    .unwrap()
    .try_get("", "updates")
    .unwrap()
}

/// Receivers that count each update of the stock through the inbox (not
/// idempotent: applied twice, it counts twice), report what the inbox did,
/// and then abort the process if `crash` (after the commit, before the
/// drain deletes the row).
fn counting_receivers(
    db: sea_orm::DatabaseConnection,
    crash: bool,
    outcomes: Arc<Mutex<Vec<Applied<()>>>>,
) -> Receivers<OutboxCategory> {
    let inbox = Inbox::new(CONSUMER);
    Receivers::new().on(
        OutboxCategory::OrganizationUpdate,
        move |message: Message<OutboxCategory>| {
            let (db, inbox, outcomes) = (db.clone(), inbox.clone(), outcomes.clone());
            async move {
                let applied = inbox
                    .apply(&db, message.message_id, |txn| {
                        Box::pin(async move {
                            txn.execute_unprepared(
                                "UPDATE stock SET updates = updates + 1 WHERE id = 1",
                            )
                            .await?;
                            Ok::<_, DbErr>(())
                        })
                    })
                    .await?;
                if crash {
                    // Committed; the outbox row is not deleted yet.
                    std::process::abort();
                }
                outcomes.lock().unwrap().push(applied);
                Ok::<_, HandlerError>(())
            }
        },
    )
}

/// The process the crash test starts: it applies the message and aborts.
/// Does nothing when run on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of a_crash_between_the_receivers_commit_and_the_delete_applies_once"]
async fn inbox_crash_child() {
    let Ok(url) = std::env::var(CHILD_DB) else {
        return;
    };
    let db = connect(&url, 4).await.unwrap();
    let store = SeaOrmStore::new(db.clone()).unwrap();
    let drainer = Drainer::new(store, counting_receivers(db, true, Arc::default()));
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    panic!("the receiver did not run");
}

/// A process applies a message through the inbox and dies after its commit,
/// before the outbox delete; the next drain delivers the message again, and
/// the inbox skips it: the stock counts one update.
async fn a_crash_between_the_receivers_commit_and_the_delete_applies_once(backend: DbBackend) {
    let t = TestDatabase::of(backend, "inbox_crash").await.unwrap();
    create_stock(&t).await;
    let message = OutboxMessage::new(OutboxCategory::OrganizationUpdate, ShardId(1), ObjectId(1));
    let written = write_region(&t.db, message).await.unwrap();

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "inbox_crash_child",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_DB, &t.url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(!status.success(), "the child aborted: {status:?}");
    // The crash point: the change and the inbox row committed, the outbox
    // row still there.
    assert_eq!(updates(&t.db).await, 1);
    assert!(Inbox::new(CONSUMER)
        .contains(&t.db, written.message_id)
        .await
        .unwrap());
    let store = t.store();
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 1);

    // Delivered again once the dead process's claim has lapsed (a clock
    // past its lease), and skipped.
    let outcomes: Arc<Mutex<Vec<Applied<()>>>> = Arc::default();
    let clock = ManualClock::new(Utc::now() + chrono::Duration::minutes(1));
    let drainer = Drainer::builder(
        store.clone(),
        counting_receivers(t.db.clone(), false, outcomes.clone()),
    )
    .shared_clock(Arc::new(clock))
    .build();
    drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(
        *outcomes.lock().unwrap(),
        [Applied::Already],
        "redelivered, skipped"
    );
    assert_eq!(updates(&t.db).await, 1, "applied once");
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 0);
}

/// Counts one update of the stock; the rows it changed.
fn count(
    txn: &sea_orm::DatabaseTransaction,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<u64, DbErr>> + Send + '_>> {
    Box::pin(async move {
        Ok(txn
            .execute_unprepared("UPDATE stock SET updates = updates + 1")
            .await?
            .rows_affected())
    })
}

/// A change that fails records nothing (the message stays new); consumers
/// have inboxes of their own; `receive` in a caller's transaction rolls
/// back with it.
async fn a_failed_change_leaves_the_message_new(backend: DbBackend) {
    let t = TestDatabase::of(backend, "inbox_apply").await.unwrap();
    create_stock(&t).await;
    let inbox = Inbox::new(CONSUMER);
    let id = Uuid::now_v7();
    let failed = inbox
        .apply(&t.db, id, |txn| {
            Box::pin(async move {
                txn.execute_unprepared("UPDATE stock SET updates = updates + 1")
                    .await?;
                Err::<(), _>(DbErr::Custom("the change failed".into()))
            })
        })
        .await;
    assert!(
        matches!(failed, Err(InboxError::Apply(DbErr::Custom(_)))),
        "{failed:?}"
    );
    assert!(!inbox.contains(&t.db, id).await.unwrap());
    assert_eq!(updates(&t.db).await, 0, "rolled back");

    assert_eq!(
        inbox.apply(&t.db, id, count).await.unwrap(),
        Applied::Now(1)
    );
    assert_eq!(
        inbox.apply(&t.db, id, count).await.unwrap(),
        Applied::Already
    );
    assert_eq!(updates(&t.db).await, 1);
    // Another consumer of the same message applies it too, once.
    let audit = Inbox::new("audit");
    assert_eq!(
        audit.apply(&t.db, id, count).await.unwrap(),
        Applied::Now(1)
    );
    assert_eq!(
        audit.apply(&t.db, id, count).await.unwrap(),
        Applied::Already
    );
    assert_eq!(updates(&t.db).await, 2);

    // In the caller's transaction: gone with its rollback.
    let other = Uuid::now_v7();
    let txn = t.db.begin().await.unwrap();
    assert_eq!(inbox.receive(&txn, other).await.unwrap(), Received::First);
    assert_eq!(
        inbox.receive(&txn, other).await.unwrap(),
        Received::Duplicate
    );
    txn.rollback().await.unwrap();
    assert!(!inbox.contains(&t.db, other).await.unwrap());
}

/// Rows older than the retention are pruned, of every consumer, in batches;
/// younger ones stay.
async fn inbox_rows_are_pruned_after_their_retention(backend: DbBackend) {
    let t = TestDatabase::of(backend, "inbox_prune").await.unwrap();
    let start = Utc::now();
    let clock = Arc::new(ManualClock::new(start));
    let inbox = Inbox::new(CONSUMER).with_clock(clock.clone());
    let audit = Inbox::new("audit").with_clock(clock.clone());
    let old = Uuid::now_v7();
    assert_eq!(inbox.receive(&t.db, old).await.unwrap(), Received::First);
    clock.advance(Duration::from_secs(3600));
    let recent = Uuid::now_v7();
    inbox.receive(&t.db, recent).await.unwrap();
    audit.receive(&t.db, old).await.unwrap();
    clock.advance(Duration::from_secs(3600));

    let retention = Duration::from_secs(90 * 60);
    let pruned = inbox::prune_older_than(&t.db, retention, clock.as_ref())
        .await
        .unwrap();
    assert_eq!(pruned, 1);
    assert!(!inbox.contains(&t.db, old).await.unwrap());
    assert!(inbox.contains(&t.db, recent).await.unwrap());
    assert!(
        audit.contains(&t.db, old).await.unwrap(),
        "received an hour later"
    );
    // Nothing more to prune.
    assert_eq!(
        inbox::prune_older_than(&t.db, retention, clock.as_ref())
            .await
            .unwrap(),
        0
    );

    // Many rows: more than one batch.
    let rows = 12_001;
    let (id, at) = match backend {
        DbBackend::Postgres => ("md5(i::text)::uuid", "now() - interval '30 days'"),
        _ => ("randomblob(16)", "'2000-01-01T00:00:00.000000+00:00'"),
    };
    t.db.execute_unprepared(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows}) \
         INSERT INTO outbox_inbox (consumer, message_id, received_at) SELECT 'bulk', {id}, {at} FROM n"
    ))
    .await
    .unwrap();
    let pruned = inbox::prune(&t.db, start).await.unwrap();
    assert_eq!(pruned, rows);
    assert!(inbox.contains(&t.db, recent).await.unwrap());
}

/// PostgreSQL: a second transaction recording an id that a first one holds
/// waits for it: `Duplicate` when it commits, `First` when it rolls back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_concurrent_receive_waits_for_the_first_ones_outcome() {
    let t = TestDatabase::postgres("inbox_concurrent").await.unwrap();
    let inbox = Inbox::new(CONSUMER);
    for commit in [true, false] {
        let id = Uuid::now_v7();
        let first = t.db.begin().await.unwrap();
        assert_eq!(inbox.receive(&first, id).await.unwrap(), Received::First);
        let (db, second_inbox) = (t.db.clone(), inbox.clone());
        let second = tokio::spawn(async move {
            let txn = db.begin().await.unwrap();
            let received = second_inbox.receive(&txn, id).await.unwrap();
            txn.commit().await.unwrap();
            received
        });
        // Until the second one waits on the first one's row lock.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let waiting =
                t.db.query_one_raw(Statement::from_string(
                    sea_orm::DbBackend::Postgres,
                    "SELECT count(*) AS n FROM pg_stat_activity \
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                ))
                .await
                .unwrap()
                .unwrap()
                .try_get::<i64>("", "n")
                .unwrap();
            if waiting > 0 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the second receive never waited"
            );
            tokio::task::yield_now().await;
        }
        if commit {
            first.commit().await.unwrap();
            assert_eq!(second.await.unwrap(), Received::Duplicate);
        } else {
            first.rollback().await.unwrap();
            assert_eq!(second.await.unwrap(), Received::First);
        }
        assert!(inbox.contains(&t.db, id).await.unwrap());
    }
}

async fn name(db: &impl ConnectionTrait) -> String {
    let backend = db.get_database_backend();
    db.query_one_raw(Statement::from_string(
        backend,
        "SELECT name FROM product WHERE id = 1",
    ))
    .await
    .unwrap()
    .unwrap()
    .try_get("", "name")
    .unwrap()
}

/// Applies a message's `{"name": …}` to product 1 through a fenced inbox.
async fn rename(
    db: &sea_orm::DatabaseConnection,
    inbox: &Inbox,
    message: &Message<OutboxCategory>,
) -> Result<Applied<()>, InboxError<DbErr>> {
    #[derive(serde::Deserialize)]
    struct Named {
        name: String,
    }
    let name = message.payload_as::<Named>().unwrap().name;
    let key = FenceKey::of("region-a", message);
    inbox
        .apply_fenced(db, message.message_id, &key, |txn| {
            Box::pin(async move {
                let backend = txn.get_database_backend();
                txn.execute_raw(Statement::from_sql_and_values(
                    backend,
                    "UPDATE product SET name = $1 WHERE id = 1",
                    [name.into()],
                ))
                .await?;
                Ok::<_, DbErr>(())
            })
        })
        .await
}

async fn write_name(t: &TestDatabase, name: &str) {
    write_region(
        &t.db,
        OutboxMessage::new(OutboxCategory::OrganizationUpdate, ShardId(7), ObjectId(1))
            .with_payload(serde_json::json!({ "name": name })),
    )
    .await
    .unwrap();
}

/// Rule 12 on a real database: a worker's receiver stalls after it read
/// "old" and before it applies it (a process paused past its lease); the
/// lease ends by the manual clock, "new" is written and another worker
/// applies it; the stalled receiver resumes and its fenced inbox refuses
/// the delivery as superseded: the product keeps "new". A plain inbox
/// would have applied "old" last (a message id it had not seen).
async fn a_paused_workers_delivery_is_superseded_in_a_fenced_inbox(backend: DbBackend) {
    let t = TestDatabase::of(backend, "inbox_fenced").await.unwrap();
    t.db.execute_unprepared("CREATE TABLE product (id bigint PRIMARY KEY, name text NOT NULL)")
        .await
        .unwrap();
    t.db.execute_unprepared("INSERT INTO product (id, name) VALUES (1, 'none')")
        .await
        .unwrap();
    write_name(&t, "old").await;
    let clock = ManualClock::starting_now();
    let config = outbox_core::DrainConfig::default();
    let inbox = Inbox::new("product-replica");
    let outcomes: Arc<Mutex<Vec<Applied<()>>>> = Arc::default();

    let (entered, mut stalled) = tokio::sync::mpsc::unbounded_channel();
    let (resume, resumed) = tokio::sync::watch::channel(false);
    let stale = Receivers::new().on(OutboxCategory::OrganizationUpdate, {
        let (db, inbox, outcomes) = (t.db.clone(), inbox.clone(), outcomes.clone());
        move |message: Message<OutboxCategory>| {
            let (db, inbox, outcomes, entered) =
                (db.clone(), inbox.clone(), outcomes.clone(), entered.clone());
            let mut resumed = resumed.clone();
            async move {
                let _ = entered.send(());
                let _ = resumed.wait_for(|go| *go).await;
                let applied = rename(&db, &inbox, &message).await?;
                outcomes.lock().unwrap().push(applied);
                Ok::<_, HandlerError>(())
            }
        }
    });
    let stale = Drainer::builder(t.store(), stale)
        .clock(clock.clone())
        .config(config)
        .build();
    let round = tokio::spawn(async move { stale.drain_due(OutboxKind::Region).await.unwrap() });
    stalled.recv().await.unwrap();
    clock.advance(config.lease_duration());

    write_name(&t, "new").await;
    let fresh = Receivers::new().on(OutboxCategory::OrganizationUpdate, {
        let (db, inbox, outcomes) = (t.db.clone(), inbox.clone(), outcomes.clone());
        move |message: Message<OutboxCategory>| {
            let (db, inbox, outcomes) = (db.clone(), inbox.clone(), outcomes.clone());
            async move {
                let applied = rename(&db, &inbox, &message).await?;
                outcomes.lock().unwrap().push(applied);
                Ok::<_, HandlerError>(())
            }
        }
    });
    let fresh = Drainer::builder(SeaOrmStore::new(t.db.clone()).unwrap(), fresh)
        .clock(clock.clone())
        .config(config)
        .build();
    let report = fresh.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!((report.deliveries, report.rows_deleted), (1, 2));
    assert_eq!(name(&t.db).await, "new");

    resume.send(true).unwrap();
    let report = round.await.unwrap();
    assert_eq!(report.lost_claims.len(), 1);
    assert_eq!(name(&t.db).await, "new", "the newer state wins");
    let outcomes = outcomes.lock().unwrap().clone();
    assert!(
        matches!(
            &outcomes[..],
            [Applied::Now(()), Applied::Superseded { highest }] if highest.get() > 0
        ),
        "{outcomes:?}"
    );
    assert_eq!(
        t.store().pending_count(OutboxKind::Region).await.unwrap(),
        0
    );
}

/// `Inbox::fence` itself: a lower token of a shard is superseded, an equal
/// one is not (one claim's messages), senders and consumers are kept
/// apart, and a transaction that rolls back records nothing.
async fn fencing_tokens_are_kept_per_consumer_sender_and_shard(backend: DbBackend) {
    use outbox_core::{FencingToken, ShardKey};
    let t = TestDatabase::of(backend, "inbox_fence_keys").await.unwrap();
    let inbox = Inbox::new("replica");
    let shard = ShardKey::region(
        outbox_testing::conformance::OutboxScope::OrganizationScope,
        7,
    );
    let key = |sender: &str, token: i64| {
        FenceKey::new(
            sender,
            &shard,
            "OrganizationUpdate",
            FencingToken::new(token),
        )
    };
    let fence = |inbox: Inbox, key: FenceKey| {
        let db = t.db.clone();
        async move {
            let txn = db.begin().await.unwrap();
            let fence = inbox.fence(&txn, &key).await.unwrap();
            txn.commit().await.unwrap();
            fence
        }
    };
    assert_eq!(fence(inbox.clone(), key("a", 5)).await, Fence::Current);
    assert_eq!(fence(inbox.clone(), key("a", 5)).await, Fence::Current);
    assert_eq!(
        fence(inbox.clone(), key("a", 4)).await,
        Fence::Superseded {
            highest: FencingToken::new(5)
        }
    );
    // Another sender's tokens, another consumer's record: independent.
    assert_eq!(fence(inbox.clone(), key("b", 1)).await, Fence::Current);
    assert_eq!(
        fence(Inbox::new("audit"), key("a", 1)).await,
        Fence::Current
    );
    // Rolled back: 9 was never applied, so 6 is still current.
    let txn = t.db.begin().await.unwrap();
    assert_eq!(
        inbox.fence(&txn, &key("a", 9)).await.unwrap(),
        Fence::Current
    );
    txn.rollback().await.unwrap();
    assert_eq!(fence(inbox.clone(), key("a", 6)).await, Fence::Current);
    assert_eq!(
        fence(inbox, key("a", 5)).await,
        Fence::Superseded {
            highest: FencingToken::new(6)
        }
    );

    // The refusals are counted where an operator reads them: two for
    // ("replica", "a"), listed first; none elsewhere.
    let (records, total) = outbox_seaorm::inbox::fences(&t.db, 10).await.unwrap();
    assert_eq!(total, 2);
    assert_eq!(records.len(), 3, "{records:?}");
    let first = &records[0];
    assert_eq!(
        (
            first.consumer.as_str(),
            first.sender.as_str(),
            first.shard.as_str()
        ),
        ("replica", "a", shard.to_string().as_str())
    );
    assert_eq!((first.fence.get(), first.superseded), (6, 2));
    assert!(first.superseded_at.is_some());
    assert!(records[1..]
        .iter()
        .all(|record| record.superseded == 0 && record.superseded_at.is_none()));
    let (top, _) = outbox_seaorm::inbox::fences(&t.db, 1).await.unwrap();
    assert_eq!(top, records[..1]);
}

outbox_testing::on_both_backends!(
    a_paused_workers_delivery_is_superseded_in_a_fenced_inbox,
    fencing_tokens_are_kept_per_consumer_sender_and_shard,
    a_crash_between_the_receivers_commit_and_the_delete_applies_once,
    a_failed_change_leaves_the_message_new,
    inbox_rows_are_pruned_after_their_retention,
);
