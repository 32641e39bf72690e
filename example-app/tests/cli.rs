//! `example-app --silo <one> outbox ...`: the built binary runs the
//! operator CLI of `outbox_seaorm::cli` on a SQLite silo's database.

#![allow(clippy::unwrap_used, missing_docs)]

use std::process::{Command, Output};

use example_app::migrations::RegionMigrator;
use example_app::registry::OutboxCategory;
use example_app::silo::open_database;
use outbox_core::StoreAdmin;
use outbox_seaorm::cli::output::{
    BackfillStatusOutput, ControlChange, ControlOutput, ShardsOutput,
};
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, SeaOrmStore, ShardId};
use sea_orm_migration::MigratorTrait;

fn sqlite_path(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join("outbox-example-cli");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{name}_{:08x}.sqlite", rand::random::<u32>()))
}

fn url(path: &std::path::Path) -> String {
    format!("sqlite://{}?mode=rwc", path.display())
}

/// Runs the binary with `args`, without the environment variables it reads.
fn example_app(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_example-app"));
    for var in [
        "SILO",
        "CONTROL_RPC_KEY",
        "US_RPC_KEY",
        "DE_RPC_KEY",
        "CONTROL_DATABASE_URL",
        "US_DATABASE_URL",
        "DE_DATABASE_URL",
        "DATA_DIR",
        "RUST_LOG",
    ] {
        command.env_remove(var);
    }
    command.args(args).output().unwrap()
}

fn stdout_json<T: serde::de::DeserializeOwned>(output: &Output) -> T {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)))
}

fn failed_with(output: &Output, message: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains(message), "{stderr}");
    assert!(
        output.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_runs_the_outbox_commands_on_one_silo() {
    let path = sqlite_path("us");
    let us = url(&path);
    let db = open_database(&us).await.unwrap();
    RegionMigrator::up(&db, None).await.unwrap();
    for object in [5, 6] {
        write_region(
            &db,
            OutboxMessage::new(
                OutboxCategory::OrganizationUpdate,
                ShardId(5),
                ObjectId(object),
            ),
        )
        .await
        .unwrap();
    }
    let on_us = |line: &str| -> Output {
        let mut args = vec!["--silo", "us", "--us-database-url", us.as_str(), "outbox"];
        args.extend(line.split_whitespace());
        example_app(&args)
    };

    let shards: ShardsOutput = stdout_json(&on_us("shards --json"));
    assert_eq!(shards.pending, outbox_core::Count::Exact(2));
    assert_eq!(shards.shards.len(), 1);
    assert_eq!(shards.shards[0].shard.identifier, Some(5));
    assert_eq!(
        shards.shards[0].shard.scope_name.as_deref(),
        Some("OrganizationScope")
    );

    let text = on_us("shards");
    assert!(text.status.success());
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("region outbox: 2 rows pending"), "{text}");

    let paused: ControlOutput = stdout_json(&on_us(
        "pause --kind region --scope OrganizationScope --shard 5 --reason upgrade --json",
    ));
    assert_eq!(paused.change, ControlChange::Paused);
    let store = SeaOrmStore::new(db.clone()).unwrap();
    assert_eq!(store.controls().await.unwrap().len(), 1);
    let resumed: ControlOutput =
        stdout_json(&on_us("resume --kind region --scope 0 --shard 5 --json"));
    assert_eq!(resumed.change, ControlChange::Resumed);
    assert!(store.controls().await.unwrap().is_empty());
    failed_with(
        &on_us("resume --kind region --scope 0 --shard 5"),
        "error: no pause or cull is set on region OrganizationScope(0)/5",
    );

    let backfills: BackfillStatusOutput = stdout_json(&on_us("backfill status --json"));
    let tables: Vec<&str> = backfills.tables.iter().map(|t| t.table.as_str()).collect();
    assert_eq!(tables, ["organization", "organization_member"]);

    // `drain` calls the other silos: it needs the silo's RPC key and its
    // peers'.
    failed_with(&on_us("drain"), "--us-rpc-key");
    // Nothing changed meanwhile.
    assert_eq!(
        store
            .pending_count(outbox_core::OutboxKind::Region)
            .await
            .unwrap(),
        2
    );

    // One silo, not all; a database without migrations is refused.
    failed_with(
        &example_app(&["--silo", "all", "outbox", "shards"]),
        "give --silo control, us or de",
    );
    let fresh = sqlite_path("de");
    failed_with(
        &example_app(&[
            "--silo",
            "de",
            "--de-database-url",
            &url(&fresh),
            "outbox",
            "shards",
        ]),
        "lacks",
    );

    db.close().await.unwrap();
    for path in [path, fresh] {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
}
