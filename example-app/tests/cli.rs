//! The built binary: `example-app --silo <one> outbox ...` runs the
//! operator CLI of `outbox_seaorm::cli` on a SQLite silo's database, and a
//! second start of all three silos leaves the running one's admin token
//! alone.

#![allow(clippy::unwrap_used, missing_docs)]

use std::process::{Command, Output};

use example_app::migrations::RegionMigrator;
use example_app::registry::OutboxCategory;
use example_app::silo::open_database;
use outbox_core::store::StoreAdmin;
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

/// The binary serving all three silos on SQLite under `data` (the folder
/// of the generated admin token) at `addrs` (control, `us`, `de`), with no
/// setting from the environment.
fn serve_all(data: &std::path::Path, addrs: &[std::net::SocketAddr; 3]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_example-app"));
    for (name, _) in std::env::vars() {
        let read_by_the_binary = [
            "SILO",
            "DATA_DIR",
            "RUST_LOG",
            "LOG_FORMAT",
            "API_TOKEN_KEY",
            "PUBLIC_METRICS",
        ]
        .contains(&name.as_str())
            || name.starts_with("OUTBOX_")
            || ["CONTROL_", "US_", "DE_"]
                .iter()
                .any(|silo| name.starts_with(silo));
        if read_by_the_binary {
            command.env_remove(name);
        }
    }
    command
        .arg(format!("--data-dir={}", data.display()))
        .arg(format!("--control-addr={}", addrs[0]))
        .arg(format!("--us-addr={}", addrs[1]))
        .arg(format!("--de-addr={}", addrs[2]))
        .stdin(std::process::Stdio::null());
    command
}

fn free_addrs() -> [std::net::SocketAddr; 3] {
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    };
    [free(), free(), free()]
}

/// A run of the binary whose standard output is read line by line as it
/// comes; killed when dropped.
struct Serving {
    child: std::process::Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl Serving {
    fn start(mut command: Command) -> Self {
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits until the binary prints a line containing `text`, for at
    /// most two minutes (it migrates three databases first).
    async fn printed(&mut self, text: &str) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) => {
                    let found = line.contains(text);
                    self.seen.push(line);
                    if found {
                        return;
                    }
                }
                outcome => panic!(
                    "{} before printing {text:?}; it printed:\n{}",
                    if outcome.is_err() {
                        "no answer within 2 minutes"
                    } else {
                        "the binary ended"
                    },
                    self.seen.join("\n")
                ),
            }
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status of an admin read (`GET /admin/outbox/shards`) on the silo at
/// `addr` with `token`.
async fn admin_read(addr: std::net::SocketAddr, token: &str) -> reqwest::StatusCode {
    reqwest::Client::new()
        .get(format!("http://{addr}/admin/outbox/shards"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
}

/// Runs `command` to its end, off the runtime's threads.
async fn run(mut command: Command) -> Output {
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

/// A second `example-app` while the first serves: on the same ports it
/// fails to listen, and on others, with the same data folder, it is
/// refused; either way the token file is unchanged and the first instance
/// still accepts its token. Once the first has ended (killed: its claim on
/// the file goes with it), a start writes a token of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_start_leaves_the_running_instances_admin_token_alone() {
    let dir = std::env::temp_dir().join(format!(
        "outbox-example-token-{:08x}",
        rand::random::<u32>()
    ));
    let data = dir.join("data");
    let token_file = data.join("admin-token");
    let addrs = free_addrs();
    let mut first = Serving::start(serve_all(&data, &addrs));
    first.printed("Ctrl-C to stop").await;
    let token = std::fs::read_to_string(&token_file).unwrap();
    assert_eq!(token.trim().len(), 32, "{token:?}");
    assert_eq!(
        admin_read(addrs[0], token.trim()).await,
        reqwest::StatusCode::OK
    );

    let same_ports = run(serve_all(&data, &addrs)).await;
    failed_with(&same_ports, "cannot listen on");
    assert_eq!(
        std::fs::read_to_string(&token_file).unwrap(),
        token,
        "a start that cannot listen writes no token"
    );
    let same_folder = run(serve_all(&data, &free_addrs())).await;
    failed_with(
        &same_folder,
        "another example-app is serving with the admin token",
    );
    assert_eq!(
        std::fs::read_to_string(&token_file).unwrap(),
        token,
        "a start refused the token file writes none"
    );
    assert_eq!(
        admin_read(addrs[0], token.trim()).await,
        reqwest::StatusCode::OK,
        "the running instance's operator is not locked out"
    );
    let leftovers: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    drop(first);
    let addrs = free_addrs();
    let mut next = Serving::start(serve_all(&data, &addrs));
    next.printed("Ctrl-C to stop").await;
    let new_token = std::fs::read_to_string(&token_file).unwrap();
    assert_ne!(new_token, token);
    assert_eq!(
        admin_read(addrs[0], new_token.trim()).await,
        reqwest::StatusCode::OK
    );
    drop(next);
    let _ = std::fs::remove_dir_all(&dir);
}
