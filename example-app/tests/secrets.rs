//! Nothing secret in what the example prints: a full run of the binary (all
//! three silos on PostgreSQL, databases reached as a role with a password,
//! RPC keys from the environment, a generated admin token) driven over HTTP
//! with debug logs on, then the outbox CLI, `--help`, and a start that fails
//! on its database; every byte they wrote to standard output and error is
//! searched for every key, token and password used.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use outbox_core::sink::webhook::WebhookSecret;
use outbox_testing::database::{admin_url, connect};
use reqwest::StatusCode;
use sea_orm::ConnectionTrait;
use serde_json::{json, Value};

/// `url` (a PostgreSQL URL) with `user:password` as its user info and
/// `database` as its database.
fn as_user(url: &str, user: &str, password: &str, database: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let host = rest[..authority_end].rsplit('@').next().unwrap();
    let query = rest[authority_end..]
        .find('?')
        .map_or("", |at| &rest[authority_end + at..]);
    format!("{scheme}://{user}:{password}@{host}/{database}{query}")
}

fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Polls `probe` every 50 ms until it holds, for at most `bound` (what
/// another process does: nothing to await).
async fn until<F, Fut>(what: &str, bound: Duration, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !probe().await {
        assert!(
            started.elapsed() < bound,
            "not yet {:.1?} after we began waiting (bound {bound:?}): {what}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await; // poll interval
    }
}

struct Setup {
    dir: PathBuf,
    role: String,
    password: String,
    databases: Vec<String>,
    urls: Vec<(&'static str, String)>,
    keys: Vec<(&'static str, String)>,
    api_token_key: String,
}

impl Setup {
    async fn new() -> Self {
        let suffix = format!("{:08x}", rand::random::<u32>());
        let role = format!("ex_secret_{suffix}");
        let password = format!("db-pa55-{suffix}-never-shown");
        let admin = admin_url().unwrap();
        let db = connect(&admin, 1).await.unwrap();
        db.execute_unprepared(&format!("CREATE ROLE {role} LOGIN PASSWORD '{password}'"))
            .await
            .unwrap();
        let mut databases = Vec::new();
        let mut urls = Vec::new();
        for silo in ["control", "us", "de"] {
            let name = format!("ex_secret_{silo}_{suffix}");
            db.execute_unprepared(&format!("CREATE DATABASE {name} OWNER {role}"))
                .await
                .unwrap();
            urls.push((silo, as_user(&admin, &role, &password, &name)));
            databases.push(name);
        }
        db.close().await.unwrap();
        let dir = std::env::temp_dir().join(format!("outbox-secrets-{suffix}"));
        std::fs::create_dir_all(&dir).unwrap();
        let keys = ["control", "us", "de"]
            .into_iter()
            .map(|silo| (silo, WebhookSecret::generate().expose()))
            .collect();
        Self {
            dir,
            role,
            password,
            databases,
            urls,
            keys,
            api_token_key: WebhookSecret::generate().expose(),
        }
    }

    /// The binary with the silos' databases and keys in its environment,
    /// its output to `<dir>/<name>.out` and `.err`.
    fn command(&self, name: &str, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_example-app"));
        for var in ["OUTBOX_ADMIN_TOKEN", "SILO", "DATABASE_URL"] {
            command.env_remove(var);
        }
        for (silo, url) in &self.urls {
            command.env(format!("{}_DATABASE_URL", silo.to_uppercase()), url);
        }
        for (silo, key) in &self.keys {
            command.env(format!("{}_RPC_KEY", silo.to_uppercase()), key);
        }
        command
            .env("API_TOKEN_KEY", &self.api_token_key)
            .env("DATA_DIR", self.dir.join("data"))
            .env("RUST_LOG", "debug")
            .args(args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(self.dir.join(format!("{name}.out"))).unwrap())
            .stderr(std::fs::File::create(self.dir.join(format!("{name}.err"))).unwrap());
        command
    }

    /// Every secret used: the keys (whole, and their base64 alone), the
    /// admin token, a user's token, the database password.
    fn secrets(&self, admin_token: &str, user_token: &str) -> Vec<String> {
        let mut secrets = vec![
            self.password.clone(),
            admin_token.to_owned(),
            user_token.to_owned(),
        ];
        let api = ("api", self.api_token_key.clone());
        for (_, key) in self.keys.iter().chain([&api]) {
            secrets.push(key.clone());
            secrets.push(key["whsec_".len()..].to_owned());
        }
        secrets
    }

    async fn drop_databases(&self) {
        let admin = connect(&admin_url().unwrap(), 1).await.unwrap();
        for name in &self.databases {
            admin
                .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await
                .unwrap();
        }
        admin
            .execute_unprepared(&format!("DROP ROLE IF EXISTS {}", self.role))
            .await
            .unwrap();
        admin.close().await.unwrap();
    }
}

fn read(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
}

/// Drives the running silos: a user (with the admin token) and a token
/// for them, then with it an organization, a member (the user replicated
/// to `us`), a rename; the admin API with the admin token, and an RPC
/// refused for a bad signature. Returns the user's token.
async fn drive(http: &reqwest::Client, control: &str, us: &str, token: &str) -> String {
    let user: Value = http
        .post(format!("{control}/api/0/users"))
        .bearer_auth(token)
        .json(&json!({ "email": "ann@example.com", "name": "Ann" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let issued: Value = http
        .post(format!("{control}/api/0/users/{}/tokens", user["id"]))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let user_token = issued["token"].as_str().unwrap().to_owned();
    let post =
        |url: String, body: Value| http.post(url).bearer_auth(&user_token).json(&body).send();
    let org: Value = post(
        format!("{us}/api/0/organizations"),
        json!({ "slug": "acme", "name": "Acme" }),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let (user, org) = (user["id"].as_i64().unwrap(), org["id"].as_i64().unwrap());
    let member = post(
        format!("{us}/api/0/organizations/{org}/members"),
        json!({ "user_id": user, "role": "owner" }),
    )
    .await
    .unwrap();
    assert_eq!(member.status(), StatusCode::CREATED);
    until("the user reaches us", Duration::from_secs(30), || async {
        http.get(format!("{us}/api/0/users/{user}"))
            .bearer_auth(&user_token)
            .send()
            .await
            .is_ok_and(|r| r.status() == StatusCode::OK)
    })
    .await;
    let renamed = http
        .put(format!("{us}/api/0/organizations/{org}"))
        .bearer_auth(&user_token)
        .json(&json!({ "name": "Acme Inc" }))
        .send()
        .await
        .unwrap();
    assert_eq!(renamed.status(), StatusCode::OK);
    let shards = http
        .get(format!("{us}/admin/outbox/shards"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(shards.status(), StatusCode::OK);
    let unsigned = http
        .put(format!("{control}/rpc/organization-mappings/{org}"))
        .header("outbox-sender", "us")
        .header(
            "outbox-message-id",
            outbox_core::uuid::Uuid::now_v7().to_string(),
        )
        .json(&json!({ "slug": "x", "name": "x", "region": "us" }))
        .send()
        .await
        .unwrap();
    assert!(unsigned.status().is_client_error());
    user_token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_token_or_password_appears_in_the_output_of_a_full_run() {
    let setup = Setup::new().await;
    let (control, us, de) = (free_addr(), free_addr(), free_addr());
    let addrs = [
        format!("--control-addr={control}"),
        format!("--us-addr={us}"),
        format!("--de-addr={de}"),
    ];
    let addr_args: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let mut server = setup.command("server", &addr_args).spawn().unwrap();
    let out = setup.dir.join("server.out");
    until("the silos start", Duration::from_secs(60), || async {
        read(&out).contains("Ctrl-C to stop")
    })
    .await;

    // The token is in a file only its owner reads, and the output says where.
    let token_file = setup.dir.join("data").join("admin-token");
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(token.len(), 32);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    assert!(
        read(&out).contains(&token_file.display().to_string()),
        "the output names the token's file"
    );

    let http = reqwest::Client::new();
    let user_token = drive(
        &http,
        &format!("http://{control}"),
        &format!("http://{us}"),
        &token,
    )
    .await;

    // The outbox CLI, `--help` with everything in the environment, and a
    // start that fails on its database (a password in its URL).
    let mut cli_args = addr_args.clone();
    cli_args.extend(["--silo", "us", "outbox", "drain", "--timeout", "30"]);
    let cli = setup.command("cli", &cli_args).status().unwrap();
    assert!(cli.success(), "{}", read(&setup.dir.join("cli.err")));
    assert!(setup
        .command("help", &["--help"])
        .status()
        .unwrap()
        .success());
    let missing = setup.urls[1]
        .1
        .replace(&setup.databases[1], "ex_secret_does_not_exist");
    let failed = setup
        .command(
            "failed",
            &[
                "--silo",
                "us",
                "--us-addr=127.0.0.1:0",
                "--us-database-url",
                &missing,
            ],
        )
        .status()
        .unwrap();
    assert!(!failed.success());
    assert!(
        read(&setup.dir.join("failed.err")).contains(":***@"),
        "the failure names the database, password masked: {}",
        read(&setup.dir.join("failed.err"))
    );

    // Ctrl-C: the silos stop.
    let interrupted = Command::new("kill")
        .args(["-INT", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    // Each silo's worker stops within its shutdown timeout; three of them,
    // twice over, bound a stop that hangs.
    let bound = outbox_core::worker::DEFAULT_SHUTDOWN_TIMEOUT * 6;
    let stopped = tokio::task::spawn_blocking(move || server.wait());
    let status = tokio::time::timeout(bound, stopped)
        .await
        .unwrap_or_else(|_| panic!("the silos did not stop within {bound:?} of Ctrl-C"))
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(read(&out).contains("stopped"));

    let mut scanned = 0;
    for name in ["server", "cli", "help", "failed"] {
        for stream in ["out", "err"] {
            let path = setup.dir.join(format!("{name}.{stream}"));
            let text = read(&path);
            scanned += text.len();
            for secret in setup.secrets(&token, &user_token) {
                assert!(
                    !text.contains(&secret),
                    "a secret appears in {} (kept)",
                    path.display()
                );
            }
        }
    }
    // Debug logs of a full run: enough text that the search means something.
    assert!(scanned > 20_000, "only {scanned} bytes of output");
    assert!(read(&out).contains("DEBUG"), "debug logs captured");
    setup.drop_databases().await;
    let _ = std::fs::remove_dir_all(&setup.dir);
}
