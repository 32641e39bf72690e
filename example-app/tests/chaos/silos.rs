//! The example app as three processes (`example-app --silo <name>`), killed
//! and restarted by the scenarios.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The silos, in the order of their databases.
pub const SILOS: [&str; 3] = ["control", "us", "de"];

/// The key of the public API's tokens (`whsec_` and 36 bytes in base64).
const API_TOKEN_KEY: &str = "whsec_Y2hhb3MtYXBpLXRva2Vucy0wMTIzNDU2Nzg5YWJjZGVmMDEy";
/// The admin token: the load uses it on the public API.
pub const ADMIN_TOKEN: &str = "chaos-admin-token-0123456789abcdef";

/// Each silo's RPC key (`whsec_` and 34 or 36 bytes in base64).
const RPC_KEYS: [(&str, &str); 3] = [
    (
        "control",
        "whsec_Y2hhb3MtY29udHJvbC1rZXktMDEyMzQ1Njc4OWFiY2RlZg==",
    ),
    (
        "us",
        "whsec_Y2hhb3MtdXMta2V5LTAxMjM0NTY3ODlhYmNkZWYwMTIzNDU2",
    ),
    (
        "de",
        "whsec_Y2hhb3MtZGUta2V5LTAxMjM0NTY3ODlhYmNkZWYwMTIzNDU2",
    ),
];

/// How long a silo may take to serve after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(60);

struct Silo {
    name: &'static str,
    addr: SocketAddr,
    database_url: String,
    listen_url: Option<String>,
    log: PathBuf,
    child: Option<Child>,
}

/// Three running silos.
pub struct Silos {
    silos: Vec<Silo>,
    dir: PathBuf,
}

impl Silos {
    /// Starts the three silos on `database_urls` (in [`SILOS`] order), each
    /// `LISTEN`ing on its `listen_urls` entry when given, with logs in `dir`.
    pub async fn start(
        dir: &Path,
        database_urls: &[String],
        listen_urls: Option<&[String]>,
    ) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let silos = SILOS
            .iter()
            .enumerate()
            .map(|(i, name)| Silo {
                name,
                addr: free_addr(),
                database_url: database_urls[i].clone(),
                listen_url: listen_urls.map(|urls| urls[i].clone()),
                log: dir.join(format!("{name}.log")),
                child: None,
            })
            .collect();
        let mut silos = Self {
            silos,
            dir: dir.to_path_buf(),
        };
        for i in 0..SILOS.len() {
            silos.spawn(i);
        }
        for i in 0..SILOS.len() {
            silos.wait_serving(i).await;
        }
        silos
    }

    /// The base URL of silo `i`.
    pub fn url(&self, i: usize) -> String {
        format!("http://{}", self.silos[i].addr)
    }

    /// The base URL of the silo named `name`.
    pub fn url_of(&self, name: &str) -> String {
        self.url(SILOS.iter().position(|silo| *silo == name).unwrap())
    }

    /// Where the silos' logs are.
    pub fn log_dir(&self) -> &Path {
        &self.dir
    }

    /// Starts a second process of silo `name` on the same database (and
    /// waits until it serves); returns its index.
    pub async fn start_twin(&mut self, name: &str) -> usize {
        let first = SILOS.iter().position(|silo| *silo == name).unwrap();
        let twin = Silo {
            name: SILOS[first],
            addr: free_addr(),
            database_url: self.silos[first].database_url.clone(),
            listen_url: self.silos[first].listen_url.clone(),
            log: self.dir.join(format!("{name}-2.log")),
            child: None,
        };
        self.silos.push(twin);
        let i = self.silos.len() - 1;
        self.spawn(i);
        self.wait_serving(i).await;
        i
    }

    /// The indices of the processes of the regions.
    pub fn region_processes(&self) -> Vec<usize> {
        (0..self.silos.len())
            .filter(|&i| self.silos[i].name != "control")
            .collect()
    }

    /// The silo name of process `i`.
    pub fn name(&self, i: usize) -> &'static str {
        self.silos[i].name
    }

    /// SIGSTOP: process `i` freezes where it is (timers, sockets,
    /// transactions and all) until [`resume`](Self::resume).
    pub fn pause(&self, i: usize) {
        self.signal(i, "-STOP");
    }

    /// SIGCONT.
    pub fn resume(&self, i: usize) {
        self.signal(i, "-CONT");
    }

    fn signal(&self, i: usize, signal: &str) {
        let pid = self.silos[i].child.as_ref().unwrap().id();
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal} {pid}");
    }

    fn spawn(&mut self, i: usize) {
        let own = (self.silos[i].name, self.silos[i].addr);
        // A second process of a silo listens on its own address.
        let addr = |name: &str| {
            if name == own.0 {
                own.1
            } else {
                self.silos[SILOS.iter().position(|s| *s == name).unwrap()].addr
            }
        };
        let silo = &self.silos[i];
        let log = File::options()
            .create(true)
            .append(true)
            .open(&silo.log)
            .unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_example-app"));
        command
            .args(["--silo", silo.name])
            // The load comes from one address, faster than a client should:
            // no rate limit on public writes.
            .arg("--writes-per-second=0")
            .arg(format!("--api-token-key={API_TOKEN_KEY}"))
            .arg(format!("--admin-token={ADMIN_TOKEN}"))
            .args(
                RPC_KEYS
                    .iter()
                    .map(|(name, key)| format!("--{name}-rpc-key={key}")),
            )
            .arg(format!("--control-addr={}", addr("control")))
            .arg(format!("--us-addr={}", addr("us")))
            .arg(format!("--de-addr={}", addr("de")))
            .arg(format!(
                "--{}-database-url={}",
                silo.name, silo.database_url
            ))
            .env("RUST_LOG", "info,sqlx=warn,sea_orm_migration=warn")
            .env_remove("DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if let Some(listen) = &silo.listen_url {
            command.arg(format!("--{}-listen-url={listen}", silo.name));
        }
        let child = command.spawn().unwrap();
        self.silos[i].child = Some(child);
    }

    /// Waits until silo `i` answers `/healthz`.
    async fn wait_serving(&mut self, i: usize) {
        let http = crate::load::client();
        let url = format!("{}/healthz", self.url(i));
        let started = Instant::now();
        loop {
            if let Ok(response) = http.get(&url).send().await {
                if response.status().is_success() {
                    return;
                }
            }
            let silo = &mut self.silos[i];
            if let Some(Ok(Some(status))) = silo.child.as_mut().map(Child::try_wait) {
                panic!(
                    "chaos suite: silo {} exited ({status}) instead of serving; log:\n{}",
                    silo.name,
                    tail(&silo.log)
                );
            }
            assert!(
                started.elapsed() < START_TIMEOUT,
                "chaos suite: silo {} did not serve within {START_TIMEOUT:?}; log:\n{}",
                silo.name,
                tail(&silo.log)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL: the process dies at once, whatever it was doing.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.silos[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts silo `i` again and waits until it serves.
    pub async fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
        self.wait_serving(i).await;
    }

    /// The last lines of every silo's log.
    pub fn log_tails(&self) -> String {
        self.silos
            .iter()
            .map(|silo| {
                format!(
                    "--- {} ({})\n{}",
                    silo.name,
                    silo.log.display(),
                    tail(&silo.log)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Stops every silo (SIGKILL: nothing is left to do for them) and
    /// removes the logs.
    pub fn stop(mut self) {
        for i in 0..self.silos.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Silos {
    fn drop(&mut self) {
        for i in 0..self.silos.len() {
            self.kill(i);
        }
    }
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
