//! Write load over HTTP: writers that create, rename and delete
//! organizations in the regions and create and rename users in Control,
//! recording every outcome in the ledger, and counting them in a
//! [`Progress`] that the scenarios' faults fire on.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::ledger::Ledger;

/// How long a client waits for an answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a wait on [`Progress`] may see its count stand still before it
/// gives up: two client timeouts, in which every request in flight has
/// answered or timed out at least once.
pub const STALL_BOUND: Duration = Duration::from_secs(2 * REQUEST_TIMEOUT.as_secs());

/// How many requests of a load (or of a probe) were answered, so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Acknowledged writes.
    pub acknowledged: usize,
    /// Requests without an acknowledgement (refused, reset, timed out,
    /// another status).
    pub failed: usize,
}

/// The counts of a load, shared by its writers: faults wait on them
/// instead of on the clock, so that a slow machine only slows the scenario.
#[derive(Clone, Debug)]
pub struct Progress(Arc<watch::Sender<Counts>>);

impl Default for Progress {
    fn default() -> Self {
        Self(Arc::new(watch::channel(Counts::default()).0))
    }
}

impl Progress {
    fn record(&self, acknowledged: bool) {
        self.0.send_modify(|counts| {
            if acknowledged {
                counts.acknowledged += 1;
            } else {
                counts.failed += 1;
            }
        });
    }

    /// The counts now.
    pub fn now(&self) -> Counts {
        *self.0.borrow()
    }

    /// Waits until `count` of the counts reaches `target`; an error, saying
    /// `what` it waited for, once that count has not grown for
    /// [`STALL_BOUND`].
    pub async fn reach(
        &self,
        what: &str,
        count: fn(&Counts) -> usize,
        target: usize,
    ) -> Result<(), String> {
        let mut counts = self.0.subscribe();
        let mut reached = count(&counts.borrow_and_update());
        let mut since = Instant::now();
        while reached < target {
            let left = STALL_BOUND.saturating_sub(since.elapsed());
            if tokio::time::timeout(left, counts.changed()).await.is_err() {
                return Err(format!(
                    "{what}: {reached} of {target}, and none more for {:.1} s (bound {:.0} s, \
                     two client timeouts)",
                    since.elapsed().as_secs_f64(),
                    STALL_BOUND.as_secs_f64()
                ));
            }
            let now = count(&counts.borrow_and_update());
            if now > reached {
                (reached, since) = (now, Instant::now());
            }
        }
        Ok(())
    }

    /// Waits for `more` acknowledged writes from now on.
    pub async fn acknowledged(&self, what: &str, more: usize) -> Result<(), String> {
        let target = self.now().acknowledged + more;
        self.reach(what, |counts| counts.acknowledged, target).await
    }
}

/// A client that opens a connection per request (a killed silo leaves no
/// pooled connection behind to fail the next request), with the admin token
/// (the public API needs credentials).
pub fn client() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {}", crate::silos::ADMIN_TOKEN)
            .parse()
            .unwrap(),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .pool_max_idle_per_host(0)
        .timeout(REQUEST_TIMEOUT)
        .build()
        .unwrap()
}

/// Why a request got no acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failure {
    /// The connection was refused (the silo was down).
    Refused,
    /// The connection broke before an answer (the silo died).
    Reset,
    /// No answer within the client's timeout.
    Timeout,
    /// An answer other than the expected success.
    Status(u16),
}

/// Outcomes of the requests of a load.
#[derive(Debug, Default)]
pub struct Tally {
    /// Acknowledged writes.
    pub acknowledged: usize,
    /// The others, by why.
    pub failures: BTreeMap<Failure, usize>,
    /// The slowest acknowledgement.
    pub slowest: Duration,
}

impl Tally {
    /// Requests answered 5xx.
    pub fn server_errors(&self) -> usize {
        self.failures
            .iter()
            .filter(|(failure, _)| matches!(failure, Failure::Status(status) if *status >= 500))
            .map(|(_, count)| count)
            .sum()
    }

    fn add(&mut self, other: &Tally) {
        self.acknowledged += other.acknowledged;
        for (failure, count) in &other.failures {
            *self.failures.entry(*failure).or_default() += count;
        }
        self.slowest = self.slowest.max(other.slowest);
    }
}

impl fmt::Display for Tally {
    /// `none`, or e.g. `12 refused, 3 reset, 2× 500`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.failures.is_empty() {
            return write!(f, "none (slowest {:.1} s)", self.slowest.as_secs_f64());
        }
        let parts: Vec<String> = self
            .failures
            .iter()
            .map(|(failure, count)| match failure {
                Failure::Refused => format!("{count} refused"),
                Failure::Reset => format!("{count} reset"),
                Failure::Timeout => format!("{count} timed out"),
                Failure::Status(status) => format!("{count}× {status}"),
            })
            .collect();
        write!(f, "{}", parts.join(", "))
    }
}

/// Where the silos are.
#[derive(Clone, Debug)]
pub struct Urls {
    pub control: String,
    pub regions: Vec<(String, String)>,
}

/// One client that writes, one request at a time, on objects of its own.
pub struct Writer {
    id: usize,
    urls: Urls,
    ledger: Arc<Mutex<Ledger>>,
    http: reqwest::Client,
    rng: StdRng,
    counter: usize,
    /// Organizations it created (id, region, slug) and may still change.
    organizations: Vec<(i64, String, String)>,
    /// Users it created.
    users: Vec<i64>,
    /// Memberships it asked for (organization, user): asked once each.
    members: std::collections::BTreeSet<(i64, i64)>,
    tally: Tally,
    progress: Progress,
}

impl Writer {
    pub fn new(
        id: usize,
        urls: Urls,
        ledger: Arc<Mutex<Ledger>>,
        progress: Progress,
        seed: u64,
    ) -> Self {
        Self {
            id,
            urls,
            ledger,
            progress,
            http: client(),
            rng: StdRng::seed_from_u64(seed ^ (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            counter: 0,
            organizations: Vec::new(),
            users: Vec::new(),
            members: std::collections::BTreeSet::new(),
            tally: Tally::default(),
        }
    }

    fn unique(&mut self, what: &str) -> String {
        self.counter += 1;
        format!("{what}-w{}-{}", self.id, self.counter)
    }

    /// One write, chosen at random.
    pub async fn step(&mut self) {
        let roll = self.rng.random_range(0..100);
        match roll {
            _ if self.organizations.is_empty() => self.create_organization().await,
            0..25 => self.create_organization().await,
            25..50 => self.rename_organization().await,
            50..55 => self.delete_organization().await,
            _ if self.users.is_empty() || roll < 70 => self.create_user().await,
            70..80 => self.add_member().await,
            _ => self.rename_user().await,
        }
    }

    async fn send(
        &mut self,
        method: Method,
        url: String,
        body: Option<Value>,
        expected: StatusCode,
    ) -> Result<Value, Failure> {
        let started = Instant::now();
        let mut request = self.http.request(method, url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let outcome = match request.send().await {
            Err(error) if error.is_connect() => Err(Failure::Refused),
            Err(error) if error.is_timeout() => Err(Failure::Timeout),
            Err(_) => Err(Failure::Reset),
            Ok(response) if response.status() == expected => {
                if expected == StatusCode::NO_CONTENT {
                    Ok(Value::Null)
                } else {
                    response.json::<Value>().await.map_err(|_| Failure::Reset)
                }
            }
            Ok(response) => Err(Failure::Status(response.status().as_u16())),
        };
        match outcome {
            Ok(_) => {
                self.tally.acknowledged += 1;
                self.tally.slowest = self.tally.slowest.max(started.elapsed());
            }
            Err(failure) => *self.tally.failures.entry(failure).or_default() += 1,
        }
        self.progress.record(outcome.is_ok());
        outcome
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap()
    }

    pub async fn create_organization(&mut self) {
        let (region, base) =
            self.urls.regions[self.rng.random_range(0..self.urls.regions.len())].clone();
        let slug = self.unique("org");
        let name = self.unique("name");
        let answer = self
            .send(
                Method::POST,
                format!("{base}/api/0/organizations"),
                Some(json!({ "slug": slug, "name": name })),
                StatusCode::CREATED,
            )
            .await;
        // An unacknowledged create has no id to follow: the replicas'
        // comparison with the regions still covers it.
        if let Ok(created) = answer {
            let id = created["id"].as_i64().unwrap();
            self.ledger().organization_created(id, &slug, &name);
            self.organizations.push((id, region, slug));
        }
    }

    async fn rename_organization(&mut self) {
        let pick = self.rng.random_range(0..self.organizations.len());
        let (id, region, slug) = self.organizations[pick].clone();
        let base = self.region_url(&region);
        let name = self.unique("name");
        let answer = self
            .send(
                Method::PUT,
                format!("{base}/api/0/organizations/{id}"),
                Some(json!({ "name": name })),
                StatusCode::OK,
            )
            .await;
        self.ledger()
            .organization_renamed(id, &slug, &name, answer.is_ok());
    }

    async fn delete_organization(&mut self) {
        let pick = self.rng.random_range(0..self.organizations.len());
        let (id, region, slug) = self.organizations.swap_remove(pick);
        let base = self.region_url(&region);
        let answer = self
            .send(
                Method::DELETE,
                format!("{base}/api/0/organizations/{id}"),
                None,
                StatusCode::NO_CONTENT,
            )
            .await;
        self.ledger()
            .organization_deleted(id, &slug, answer.is_ok());
    }

    /// Makes one of its users a member of one of its organizations: the
    /// region replicates the membership to Control, which then replicates
    /// the user to the region.
    async fn add_member(&mut self) {
        let (organization, region, _) =
            self.organizations[self.rng.random_range(0..self.organizations.len())].clone();
        let user = self.users[self.rng.random_range(0..self.users.len())];
        if !self.members.insert((organization, user)) {
            // Already a member (or maybe, after an unacknowledged request).
            return self.rename_user().await;
        }
        let base = self.region_url(&region);
        let answer = self
            .send(
                Method::POST,
                format!("{base}/api/0/organizations/{organization}/members"),
                Some(json!({ "user_id": user, "role": "member" })),
                StatusCode::CREATED,
            )
            .await;
        if let Ok(member) = answer {
            let id = member["id"].as_i64().unwrap();
            self.ledger().member_added(id, organization, user);
        }
    }

    async fn create_user(&mut self) {
        let email = format!("{}@example.com", self.unique("user"));
        let name = self.unique("name");
        let answer = self
            .send(
                Method::POST,
                format!("{}/api/0/users", self.urls.control),
                Some(json!({ "email": email, "name": name })),
                StatusCode::CREATED,
            )
            .await;
        if let Ok(created) = answer {
            let id = created["id"].as_i64().unwrap();
            self.ledger().user_created(id, &email, &name);
            self.users.push(id);
        }
    }

    async fn rename_user(&mut self) {
        let id = self.users[self.rng.random_range(0..self.users.len())];
        let name = self.unique("name");
        let answer = self
            .send(
                Method::PUT,
                format!("{}/api/0/users/{id}", self.urls.control),
                Some(json!({ "name": name })),
                StatusCode::OK,
            )
            .await;
        self.ledger().user_renamed(id, &name, answer.is_ok());
    }

    /// A process of `region` (one of two, when it runs two).
    fn region_url(&mut self, region: &str) -> String {
        let processes: Vec<String> = self
            .urls
            .regions
            .iter()
            .filter(|(name, _)| name == region)
            .map(|(_, url)| url.clone())
            .collect();
        processes[self.rng.random_range(0..processes.len())].clone()
    }
}

/// Writers writing until stopped.
pub struct Load {
    stop: Arc<AtomicBool>,
    writers: tokio::task::JoinSet<Tally>,
}

impl Load {
    /// `writers` concurrent writers, counting in `progress`.
    pub fn start(
        urls: &Urls,
        ledger: &Arc<Mutex<Ledger>>,
        progress: &Progress,
        writers: usize,
        seed: u64,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let mut set = tokio::task::JoinSet::new();
        for id in 0..writers {
            let mut writer = Writer::new(id, urls.clone(), ledger.clone(), progress.clone(), seed);
            let stop = stop.clone();
            set.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    writer.step().await;
                }
                writer.tally
            });
        }
        Self { stop, writers: set }
    }

    /// Lets every writer finish its request; returns what they got.
    pub async fn stop(self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        let mut tally = Tally::default();
        for writer in self.writers.join_all().await {
            tally.add(&writer);
        }
        tally
    }
}

/// `count` organizations created at once, each by its own client.
pub async fn wave(
    urls: &Urls,
    ledger: &Arc<Mutex<Ledger>>,
    progress: &Progress,
    count: usize,
    first_id: usize,
    seed: u64,
) -> Tally {
    let mut set = tokio::task::JoinSet::new();
    for id in first_id..first_id + count {
        let mut writer = Writer::new(id, urls.clone(), ledger.clone(), progress.clone(), seed);
        set.spawn(async move {
            writer.create_organization().await;
            writer.tally
        });
    }
    let mut tally = Tally::default();
    for writer in set.join_all().await {
        tally.add(&writer);
    }
    tally
}

impl Tally {
    /// Adds the outcomes of `other`.
    pub fn merge(&mut self, other: Tally) {
        self.add(&other);
    }
}

/// Creates organizations through the process at `base`, one after the
/// other, until stopped: what a region's other process serves while one is
/// paused. Not in the ledger (a create's id is only known from its answer;
/// the replicas' comparison with the regions covers them).
pub struct Probe {
    /// Its creates so far.
    pub progress: Progress,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<ProbeOutcome>,
}

/// What a [`Probe`] saw.
#[derive(Debug, Default)]
pub struct ProbeOutcome {
    /// Each create answered 201: when it was sent, when it was answered.
    pub creates: Vec<(Instant, Instant)>,
    /// The creates that failed.
    pub failures: Vec<String>,
}

impl ProbeOutcome {
    /// The `q` quantile of the creates' latencies (0 with none).
    pub fn quantile(&self, q: f64) -> Duration {
        let mut sorted: Vec<Duration> = self
            .creates
            .iter()
            .map(|(sent, answered)| *answered - *sent)
            .collect();
        sorted.sort_unstable();
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        let at = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
        sorted[at]
    }
}

impl Probe {
    pub fn start(base: String) -> Self {
        // Slugs unique across the probes of a run.
        static PROBES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let probe = PROBES.fetch_add(1, Ordering::Relaxed);
        let progress = Progress::default();
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let (progress, stop) = (progress.clone(), stop.clone());
            async move {
                let http = client();
                let mut outcome = ProbeOutcome::default();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let slug = format!("probe-{probe}-{n}");
                    let sent = Instant::now();
                    let answer = http
                        .post(format!("{base}/api/0/organizations"))
                        .json(&json!({ "slug": slug, "name": slug }))
                        .send()
                        .await;
                    let failure = match answer {
                        Ok(response) if response.status() == StatusCode::CREATED => None,
                        Ok(response) => Some(format!(
                            "{}: {}",
                            response.status(),
                            response.text().await.unwrap_or_default()
                        )),
                        Err(error) => Some(error.to_string()),
                    };
                    progress.record(failure.is_none());
                    match failure {
                        None => outcome.creates.push((sent, Instant::now())),
                        Some(failure) => outcome.failures.push(failure),
                    }
                }
                outcome
            }
        });
        Self {
            progress,
            stop,
            task,
        }
    }

    /// Lets the create in flight finish; returns what the probe saw.
    pub async fn stop(self) -> ProbeOutcome {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}
