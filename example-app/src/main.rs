//! A first look at the outbox on SQLite.
//!
//! Run with `cargo run -p example-app`.
//!
//! It creates `./.data/region-us.sqlite`, applies the outbox migrations, and
//! then, once a second, renames an organization in a transaction that also
//! writes an outbox row. Even renames are flushed synchronously right after
//! their commit; odd ones are left to the background drain, which picks them
//! up within its poll interval. A receiver prints every delivery: several
//! renames of one organization that wait together are coalesced into the
//! newest. Stop it with Ctrl-C.
//!
//! The full hybrid-cloud demo (a Control silo and two Region silos over HTTP)
//! replaces this program in a later issue.

use std::time::Duration;

use outbox_core::{Drainer, HandlerError, Message, OutboxKind, Receivers};
use outbox_seaorm::{write_region, OutboxMessage, SeaOrmStore};
use sea_orm::{ConnectOptions, Database, TransactionTrait};
use sea_orm_migration::MigratorTrait;

outbox_core::registry! {
    /// Organization-owned data, sharded by organization id.
    OrganizationScope = 0 (shard_field = "organization_id") {
        /// An organization was renamed.
        OrganizationRename = 1,
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Rename {
    name: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sqlx=warn".into()),
        )
        .init();

    std::fs::create_dir_all(".data")?;
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "sqlite://.data/region-us.sqlite?mode=rwc".to_owned());
    let mut options = ConnectOptions::new(url.clone());
    options.sqlx_logging(false).max_connections(5);
    let db = Database::connect(options).await?;
    outbox_migrations::OutboxMigrator::up(&db, None).await?;
    println!("outbox example on {url}; Ctrl-C to stop");

    let receivers = Receivers::new().on(
        OutboxCategory::OrganizationRename,
        |message: Message<OutboxCategory>| async move {
            let rename: Rename = message.payload_as()?;
            println!(
                "  delivered: organization {} is now {:?} ({} row(s) coalesced, {})",
                message.object_identifier,
                rename.name,
                message.coalesced,
                if message.synchronous {
                    "flushed after commit"
                } else {
                    "background drain"
                }
            );
            Ok::<_, HandlerError>(())
        },
    );
    receivers.ensure_complete()?;
    let drainer = Drainer::new(SeaOrmStore::new(db.clone())?, receivers);

    let background = tokio::spawn({
        let drainer = drainer.clone();
        async move {
            loop {
                match drainer.drain_due(OutboxKind::Region).await {
                    Ok(report) => {
                        for failure in report.failures {
                            tracing::warn!(shard = %failure.shard, error = %failure.error, "delivery failed");
                        }
                    }
                    Err(error) => tracing::warn!(%error, "background drain round failed"),
                }
                tokio::time::sleep(Duration::from_millis(2500)).await;
            }
        }
    });

    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut n: i64 = 0;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = tick.tick() => {}
        }
        n += 1;
        let organization = n % 3 + 1;
        let name = format!("org-{organization}-v{n}");
        let txn = db.begin().await?;
        // ... the model update would go here, on `&txn` ...
        let row = write_region(
            &txn,
            OutboxMessage::new(
                OutboxCategory::OrganizationRename,
                organization,
                organization,
            )
            .with_payload_of(&Rename { name: name.clone() })?,
        )
        .await?;
        txn.commit().await?;
        if n % 2 == 0 {
            println!("renamed organization {organization} to {name:?}; flushing now");
            drainer.drain_shard(&row.shard, Some(row.id)).await?;
        } else {
            println!("renamed organization {organization} to {name:?}; deferred");
        }
    }
    background.abort();
    let pending = drainer.store().pending_count(OutboxKind::Region).await?;
    println!("stopped; {pending} row(s) left for the next run");
    Ok(())
}
