//! The hybrid-cloud demo: one Control silo and two Region silos.
//!
//! Run with `cargo run -p example-app`: all three silos in this process, on
//! 127.0.0.1:8000 (control), :8001 (`us`) and :8002 (`de`), each with its own
//! SQLite file under `./.data/` (created and migrated on first run). Ctrl-C
//! stops them cleanly. `--help` lists the flags (and their environment
//! variables) that run one silo per process, move the addresses, or point a
//! silo at PostgreSQL.
//!
//! `example-app --silo us outbox shards` (or `dead-letters`, `pause`,
//! `cull`, `resume`, `retry`, `drain`, `backfill`; `--json` for JSON)
//! operates the outbox of one silo's database without serving it: see
//! `outbox_seaorm::cli`. It needs one silo (`--silo control|us|de`), not
//! `all`: each silo has its own database and outboxes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use example_app::admin_token::TokenFile;
use example_app::limits::{self, Limits, WriteRate};
use example_app::silo::{self, Role, SiloConfig};
use example_app::telemetry::{self, LogFormat, LogTo};
use outbox_seaorm::cli::{OutboxArgs, OutboxCommand};

/// Which silo(s) this process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Which {
    /// Control and both regions, in this process.
    All,
    /// Only the control silo.
    Control,
    /// Only the `us` region.
    Us,
    /// Only the `de` region.
    De,
}

/// What to do instead of serving.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Self-hosted upgrade: run the migrations of the silos, then every
    /// backfill in force mode, then drain every outbox; prints progress and a
    /// summary. Safe to run twice.
    Upgrade,
    /// Operate the outbox of one silo (`--silo control|us|de`, not `all`),
    /// without serving it: shards, dead letters, pause/cull/resume, retry,
    /// drain, backfill. `drain` delivers through the other silos' RPC, so it
    /// needs the silo's RPC key and its peers' (`--control-rpc-key`, ...).
    Outbox(OutboxArgs),
}

/// Hybrid-cloud outbox demo: a Control silo and Region silos `us` and `de`.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Which silo(s) to run.
    #[arg(long, value_enum, default_value = "all", env = "SILO")]
    silo: Which,
    /// Address of the control silo.
    #[arg(long, default_value = "127.0.0.1:8000", env = "CONTROL_ADDR")]
    control_addr: SocketAddr,
    /// Address of the `us` region.
    #[arg(long, default_value = "127.0.0.1:8001", env = "US_ADDR")]
    us_addr: SocketAddr,
    /// Address of the `de` region.
    #[arg(long, default_value = "127.0.0.1:8002", env = "DE_ADDR")]
    de_addr: SocketAddr,
    /// Folder of the default SQLite databases.
    #[arg(long, default_value = ".data", env = "DATA_DIR")]
    data_dir: PathBuf,
    /// Database of the control silo (default: SQLite in the data folder), e.g.
    /// postgres://user@host/control.
    #[arg(long, env = "CONTROL_DATABASE_URL", hide_env_values = true)]
    control_database_url: Option<String>,
    /// Database of the `us` region (default: SQLite in the data folder).
    #[arg(long, env = "US_DATABASE_URL", hide_env_values = true)]
    us_database_url: Option<String>,
    /// Database of the `de` region (default: SQLite in the data folder).
    #[arg(long, env = "DE_DATABASE_URL", hide_env_values = true)]
    de_database_url: Option<String>,
    /// PostgreSQL URL for the control silo's `LISTEN` connection (session
    /// state), when its database URL goes through a transaction-pooling
    /// proxy such as PgBouncer in transaction mode: point it at PostgreSQL
    /// directly. Default: the database URL.
    #[arg(long, env = "CONTROL_LISTEN_URL", hide_env_values = true)]
    control_listen_url: Option<String>,
    /// The same for the `us` region.
    #[arg(long, env = "US_LISTEN_URL", hide_env_values = true)]
    us_listen_url: Option<String>,
    /// The same for the `de` region.
    #[arg(long, env = "DE_LISTEN_URL", hide_env_values = true)]
    de_listen_url: Option<String>,
    /// The control silo's RPC key: `whsec_` and 32 or more random bytes in
    /// base64 (`echo whsec_$(openssl rand -base64 32)`). Control signs its
    /// calls with it, the regions verify them with it. During a rotation,
    /// two keys separated by a comma (`new,old`): signed with both, either
    /// accepted. Needed by every silo run on its own; generated at random
    /// when running all three.
    #[arg(long, env = "CONTROL_RPC_KEY", hide_env_values = true)]
    control_rpc_key: Option<String>,
    /// The `us` region's RPC key (as --control-rpc-key): needed by `us` and
    /// by Control.
    #[arg(long, env = "US_RPC_KEY", hide_env_values = true)]
    us_rpc_key: Option<String>,
    /// The key of the public API's user tokens, the same for every silo
    /// (`whsec_` and 32 or more random bytes in base64; `new,old` during a
    /// rotation): Control issues tokens with it, every silo checks them.
    /// Generated at random when running all three.
    #[arg(long, env = "API_TOKEN_KEY", hide_env_values = true)]
    api_token_key: Option<String>,
    /// The `de` region's RPC key (as --control-rpc-key): needed by `de` and
    /// by Control.
    #[arg(long, env = "DE_RPC_KEY", hide_env_values = true)]
    de_rpc_key: Option<String>,
    /// How often an idle outbox drain looks for work when nothing wakes it.
    #[arg(long, default_value_t = 1000, env = "POLL_INTERVAL_MS")]
    poll_interval_ms: u64,
    /// How long a client may take to send a request body, in milliseconds.
    #[arg(long, default_value_t = 10_000, env = "BODY_TIMEOUT_MS")]
    body_timeout_ms: u64,
    /// The bearer token of the outbox admin API (`/admin/outbox` on every
    /// silo: shards, controls, dead letters). When running all three silos
    /// without one, one is generated and written to `<data-dir>/admin-token`
    /// (mode 0600; its path is printed, never the token) once the silos'
    /// addresses are bound; a start whose data folder's token is in use by
    /// a running instance is refused. Without one, a single silo serves no
    /// admin API.
    #[arg(long, env = "OUTBOX_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// A second admin token that may only read (the admin API's viewer
    /// role), 32 bytes or more; needs --admin-token.
    #[arg(long, env = "OUTBOX_VIEWER_TOKEN", hide_env_values = true)]
    viewer_token: Option<String>,
    /// Serve /metrics without a token. By default a scrape needs the admin
    /// or the viewer token (`Authorization: Bearer …`) when there is one.
    #[arg(long, env = "PUBLIC_METRICS")]
    public_metrics: bool,
    /// The largest request body accepted, in bytes; the same for every silo.
    #[arg(long, default_value_t = example_app::silo::DEFAULT_BODY_LIMIT, env = "BODY_LIMIT_BYTES")]
    body_limit_bytes: usize,
    /// How long a client may take to send a request's head (request line and
    /// headers), and may keep a connection idle, in milliseconds; the
    /// connection is closed after it (slow clients cannot hold sockets).
    #[arg(long, default_value_t = 5_000, env = "HEADER_TIMEOUT_MS")]
    header_timeout_ms: u64,
    /// How many connections each silo serves at once; more wait to be
    /// accepted.
    #[arg(long, default_value_t = limits::DEFAULT_MAX_CONNECTIONS, env = "MAX_CONNECTIONS")]
    max_connections: usize,
    /// How long a request may run, in milliseconds (503 after it).
    #[arg(long, default_value_t = 30_000, env = "REQUEST_TIMEOUT_MS")]
    request_timeout_ms: u64,
    /// Public writes (POST, PUT, DELETE under /api/0/) per second per client
    /// address, sustained (429 with retry-after beyond); 0 for no limit.
    #[arg(long, default_value_t = limits::DEFAULT_WRITES_PER_SECOND, env = "WRITES_PER_SECOND")]
    writes_per_second: u32,
    /// Public writes per client address at once, before the rate applies.
    #[arg(long, default_value_t = limits::DEFAULT_WRITE_BURST, env = "WRITE_BURST")]
    write_burst: u32,
    /// How log lines are written: `text` (colours only on a terminal) or
    /// `json` (one object a line, for a log shipper).
    #[arg(long, value_enum, default_value = "text", env = "LOG_FORMAT")]
    log_format: LogFormat,
}

impl Args {
    fn database_url(&self, name: &str, given: &Option<String>) -> String {
        given.clone().unwrap_or_else(|| {
            format!(
                "sqlite://{}/{name}.sqlite?mode=rwc",
                self.data_dir.display()
            )
        })
    }

    /// The RPC keys given, by silo; with `generate`, a random one for each
    /// silo without one (all three in one process: nobody else calls them).
    fn rpc_keys(&self, generate: bool) -> BTreeMap<String, String> {
        [
            ("control", &self.control_rpc_key),
            ("us", &self.us_rpc_key),
            ("de", &self.de_rpc_key),
        ]
        .into_iter()
        .filter_map(|(silo, given)| {
            let key = match given {
                Some(key) => key.clone(),
                None if generate => example_app::rpc::keys::generate(),
                None => return None,
            };
            Some((silo.to_owned(), key))
        })
        .collect()
    }

    fn config(
        &self,
        role: Role,
        rpc_keys: &BTreeMap<String, String>,
        admin_token: Option<&str>,
    ) -> SiloConfig {
        let (database_url, listen_url) = match &role {
            Role::Control => (
                self.database_url("control", &self.control_database_url),
                &self.control_listen_url,
            ),
            Role::Region(name) if name == "us" => (
                self.database_url("us", &self.us_database_url),
                &self.us_listen_url,
            ),
            Role::Region(_) => (
                self.database_url("de", &self.de_database_url),
                &self.de_listen_url,
            ),
        };
        SiloConfig {
            role,
            database_url,
            listen_url: listen_url.clone(),
            rpc_keys: rpc_keys.clone(),
            api_token_key: self.api_token_key.clone().unwrap_or_default(),
            control_url: format!("http://{}", self.control_addr),
            region_urls: BTreeMap::from([
                ("us".to_owned(), format!("http://{}", self.us_addr)),
                ("de".to_owned(), format!("http://{}", self.de_addr)),
            ]),
            poll_interval: Duration::from_millis(self.poll_interval_ms.max(1)),
            body_timeout: Duration::from_millis(self.body_timeout_ms.max(1)),
            body_limit: self.body_limit_bytes,
            admin_token: admin_token.map(str::to_owned),
            viewer_token: self.viewer_token.clone(),
            public_metrics: self.public_metrics,
            limits: Limits {
                header_timeout: Duration::from_millis(self.header_timeout_ms.max(1)),
                max_connections: self.max_connections.max(1),
                request_timeout: Duration::from_millis(self.request_timeout_ms.max(1)),
                write_rate: (self.writes_per_second > 0).then_some(WriteRate {
                    per_second: self.writes_per_second,
                    burst: self.write_burst.max(1),
                }),
            },
        }
    }
}

#[tokio::main]
async fn main() {
    if let Err(error) = serve(Args::parse()).await {
        // Display, not the Debug that returning the error would print (a
        // database error's Debug holds its URL, password included).
        eprintln!("error: {error}");
        std::process::exit(1);
    }
}

/// Binds the listener of each silo of `roles`, all before any is started:
/// a start on an address in use fails before it changes anything.
async fn bind_all(
    roles: Vec<(Role, SocketAddr)>,
) -> Result<Vec<(Role, tokio::net::TcpListener)>, String> {
    let mut bound = Vec::with_capacity(roles.len());
    for (role, addr) in roles {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        bound.push((role, listener));
    }
    Ok(bound)
}

async fn serve(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(Command::Outbox(outbox)) = &args.command {
        // Standard output is the command's answer (JSON with --json): logs
        // go to standard error, warnings only unless RUST_LOG says more.
        telemetry::init_logging(args.log_format, LogTo::Stderr, "warn");
        return run_outbox(&args, outbox).await;
    }
    telemetry::init_logging(
        args.log_format,
        LogTo::Stdout,
        "info,sqlx=warn,sea_orm_migration=warn",
    );
    // One silo per process: its key and its peers' are required (the silo
    // names the missing one at start).
    let rpc_keys = args.rpc_keys(args.silo == Which::All);
    let mut args = args;
    if args.silo == Which::All && args.api_token_key.is_none() {
        args.api_token_key = Some(example_app::rpc::keys::generate());
    }
    let token_file = args.data_dir.join("admin-token");
    let roles: Vec<(Role, SocketAddr)> = match args.silo {
        Which::All => vec![
            (Role::Control, args.control_addr),
            (Role::Region("us".into()), args.us_addr),
            (Role::Region("de".into()), args.de_addr),
        ],
        Which::Control => vec![(Role::Control, args.control_addr)],
        Which::Us => vec![(Role::Region("us".into()), args.us_addr)],
        Which::De => vec![(Role::Region("de".into()), args.de_addr)],
    };
    let listeners = bind_all(roles).await?;
    // Only once every listener is bound, and never over the token of an
    // instance still running: the file stays claimed until this one ends.
    let (admin_token, _claimed) = match (&args.admin_token, args.silo) {
        (Some(token), _) if !token.is_empty() => (Some(token.clone()), None),
        (_, Which::All) => {
            let file = TokenFile::claim(&token_file)?;
            let token = format!("{:032x}", rand::random::<u128>());
            file.write(&token)?;
            (Some(token), Some(file))
        }
        _ => (None, None),
    };
    if let Some(Command::Upgrade) = args.command {
        let configs = listeners
            .into_iter()
            .map(|(role, listener)| {
                (
                    args.config(role, &rpc_keys, admin_token.as_deref()),
                    listener,
                )
            })
            .collect();
        let report = example_app::upgrade::run(configs, &mut std::io::stderr()).await?;
        println!(
            "backfilled {} rows, delivered {} outbox messages",
            report.total_backfilled(),
            report.delivered
        );
        return Ok(());
    }
    let mut running = Vec::new();
    for (role, listener) in listeners {
        let name = match &role {
            Role::Control => "control".to_owned(),
            Role::Region(name) => format!("region {name}"),
        };
        let silo = silo::start(
            args.config(role, &rpc_keys, admin_token.as_deref()),
            listener,
        )
        .await?;
        println!("{name:<10} http://{}", silo.addr);
        running.push(silo);
    }
    if admin_token.is_some() {
        if let Some(first) = running.first() {
            println!(
                "dashboard  http://{}/admin/outbox/dashboard (log in with the admin token)",
                first.addr
            );
        }
    }
    match (&admin_token, &args.admin_token) {
        (Some(_), given) if given.as_deref().is_none_or(str::is_empty) => println!(
            "admin API  /admin/outbox on every silo; the token is in {} (mode 0600): \
             -H \"authorization: Bearer $(cat {})\"",
            token_file.display(),
            token_file.display()
        ),
        (Some(_), _) => println!("admin API  /admin/outbox on every silo (your token)"),
        (None, _) => println!("admin API  off (give --admin-token)"),
    }
    println!("Ctrl-C to stop");
    tokio::signal::ctrl_c().await?;
    for silo in running {
        silo.shutdown().await?;
    }
    println!("stopped");
    Ok(())
}

/// `example-app --silo <one> outbox ...`.
async fn run_outbox(args: &Args, outbox: &OutboxArgs) -> Result<(), Box<dyn std::error::Error>> {
    let role = match args.silo {
        Which::All => {
            return Err(
                "`outbox` works on one silo's database: give --silo control, us or de \
                        (each silo has its own outboxes)"
                    .into(),
            )
        }
        Which::Control => Role::Control,
        Which::Us => Role::Region("us".into()),
        Which::De => Role::Region("de".into()),
    };
    // `drain` calls the other silos, which check its key: the silo's own and
    // its peers' keys are required (named when missing). Nothing else calls
    // another silo: keys made up for the occasion do.
    let rpc_keys = args.rpc_keys(!matches!(outbox.command, OutboxCommand::Drain(_)));
    let cli = silo::outbox_cli(&args.config(role, &rpc_keys, None)).await?;
    cli.run(outbox, &mut std::io::stdout()).await?;
    Ok(())
}
