//! The scenarios: set-up, faults under load, convergence, checks.
//!
//! Faults fire on the load's progress, never after a sleep: the first once
//! the writers have had [`WARM_UP`] writes acknowledged, each next one a
//! number of acknowledged writes later drawn from the seed. A fault ends on
//! what it was meant to cause: a killed silo once the load has seen it
//! down, lockers once requests and deliveries wait on them, a pause once
//! the region's other process has served creates past the paused one's
//! lease. Where a fault is a time by definition (a pause past the lease and
//! a poll, the long form's locks past the delivery timeout) it lasts at
//! least that long, which a loaded machine only lengthens. A slow machine
//! slows the scenarios down; it does not change what they check.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_core::drain::{DEFAULT_DELIVERY_TIMEOUT, DEFAULT_LEASE};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sea_orm::DatabaseConnection;

use crate::ledger::{Ledger, Snapshot};
use crate::load::{self, Load, Probe, Progress, Tally, Urls, STALL_BOUND};
use crate::postgres::{Locker, Postgres};
use crate::silos::{Silos, SILOS};

/// Concurrent writers of the steady load.
const WRITERS: usize = 6;
/// Acknowledged writes before the first fault.
const WARM_UP: usize = 50;
/// Acknowledged writes between two faults, drawn from the seed.
const BETWEEN_FAULTS: std::ops::Range<usize> = 40..120;
/// The silos' poll interval (the example's default, `--poll-interval-ms`).
const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How long after the last fault everything must have converged: what a
/// recovery waits for at most, a lease (a killed process's claims), a
/// delivery timeout (a call in flight when the fault ended) and a poll,
/// four times over for a loaded machine. The table shows what it took.
const CONVERGENCE_BOUND: Duration = Duration::from_secs(
    4 * (DEFAULT_LEASE.as_secs() + DEFAULT_DELIVERY_TIMEOUT.as_secs() + POLL_INTERVAL.as_secs()),
);

/// How much chaos: `OUTBOX_CHAOS_SCALE`, `bounded` (the default, in the
/// test command) or `long` (more and longer faults of each kind, a few
/// minutes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// About two minutes in all, in the test command.
    Bounded,
    /// As in the chaos run the suite reproduces.
    Long,
}

impl Scale {
    /// The scale `OUTBOX_CHAOS_SCALE` names (bounded when unset).
    pub fn from_env() -> Self {
        match std::env::var("OUTBOX_CHAOS_SCALE").as_deref() {
            Err(_) | Ok("" | "bounded") => Scale::Bounded,
            Ok("long") => Scale::Long,
            Ok(other) => panic!("OUTBOX_CHAOS_SCALE={other:?}: `bounded` or `long`"),
        }
    }

    fn pick(self, bounded: u32, long: u32) -> u32 {
        match self {
            Scale::Bounded => bounded,
            Scale::Long => long,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    Sigkill,
    CrashRestart,
    TerminateStorm,
    IdleLockers,
    LoadWaves,
    PgBouncerRestart,
    Pause,
    Slowloris,
}

impl Scenario {
    pub const ALL: [Scenario; 8] = [
        Scenario::Sigkill,
        Scenario::CrashRestart,
        Scenario::TerminateStorm,
        Scenario::IdleLockers,
        Scenario::LoadWaves,
        Scenario::PgBouncerRestart,
        Scenario::Pause,
        Scenario::Slowloris,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Sigkill => "sigkill",
            Scenario::CrashRestart => "crash_restart",
            Scenario::TerminateStorm => "terminate",
            Scenario::IdleLockers => "lockers",
            Scenario::LoadWaves => "waves",
            Scenario::PgBouncerRestart => "pgbouncer",
            Scenario::Pause => "pause",
            Scenario::Slowloris => "slowloris",
        }
    }

    /// Whether the scenario's faults may answer a request with a 5xx: those
    /// that take the database away under a request (a crash restart, a
    /// terminated backend, a restarted pooler). The others' faults refuse
    /// or reset connections, hold locks or stop processes: a 5xx there is a
    /// bug, not the fault.
    fn faults_may_answer_5xx(self) -> bool {
        matches!(
            self,
            Scenario::CrashRestart | Scenario::TerminateStorm | Scenario::PgBouncerRestart
        )
    }
}

/// One line of the table, and what went wrong.
pub struct Row {
    scenario: String,
    acknowledged: usize,
    lost: Vec<String>,
    stale: Vec<String>,
    duplicated: Vec<String>,
    client_errors: String,
    converged: Option<Duration>,
    /// What was left when it did not converge.
    unconverged: Option<String>,
    /// The scenario's own checks that failed.
    failed: Vec<String>,
    logs: Option<String>,
}

impl Row {
    /// Each violation, one line (with the silos' logs after the first).
    pub fn violations(&self) -> Vec<String> {
        let mut violations = Vec::new();
        let name = &self.scenario;
        for (what, items) in [
            ("lost", &self.lost),
            ("stale", &self.stale),
            ("duplicated", &self.duplicated),
        ] {
            for item in items.iter().take(10) {
                violations.push(format!("{name}: {what}: {item}"));
            }
            if items.len() > 10 {
                violations.push(format!("{name}: … {} more {what}", items.len() - 10));
            }
        }
        for failed in &self.failed {
            violations.push(format!("{name}: {failed}"));
        }
        if self.converged.is_none() {
            violations.push(format!(
                "{name}: not converged within {CONVERGENCE_BOUND:?} of the last fault (four \
                 times a lease, a delivery timeout and a poll): {}",
                self.unconverged.as_deref().unwrap_or("")
            ));
        }
        if let (false, Some(logs)) = (violations.is_empty(), &self.logs) {
            violations.push(logs.clone());
        }
        violations
    }
}

/// The report.
pub fn table(rows: &[Row], scale: Scale, seed: u64) -> String {
    let mut table = format!(
        "\nchaos suite ({scale:?}, OUTBOX_CHAOS_SEED={seed}): three silos as processes, \
         {WRITERS} writers over HTTP, PostgreSQL\n\n\
         | scenario | acknowledged writes | lost | stale | duplicated | client errors | converged after the last fault (bound {} s) |\n\
         |---|---|---|---|---|---|---|\n",
        CONVERGENCE_BOUND.as_secs()
    );
    for row in rows {
        let converged = row.converged.map_or_else(
            || format!("not within {} s", CONVERGENCE_BOUND.as_secs()),
            |after| format!("{:.1} s", after.as_secs_f64()),
        );
        table.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            row.scenario,
            row.acknowledged,
            row.lost.len(),
            row.stale.len(),
            row.duplicated.len(),
            row.client_errors,
            converged
        ));
    }
    table.push('\n');
    table
}

/// Everything a scenario's faults need.
struct Stage<'a> {
    postgres: &'a Postgres,
    silos: Silos,
    urls: Urls,
    ledger: Arc<Mutex<Ledger>>,
    /// The silos' databases, directly (not through PgBouncer).
    database_urls: Vec<String>,
    bouncer: Option<outbox_testing::database::PgBouncer>,
    rng: StdRng,
    seed: u64,
    /// The steady load's progress (the waves' too).
    progress: Progress,
    tally: Tally,
    /// The scenario's own checks that failed.
    failed: Vec<String>,
}

/// Runs `scenario` on fresh databases and silos.
pub async fn run(scenario: Scenario, scale: Scale, postgres: &Postgres, seed: u64) -> Row {
    let databases = postgres.databases(scenario.name()).await;
    let database_urls: Vec<String> = databases.iter().map(|(url, _)| url.clone()).collect();
    let bouncer = match scenario {
        Scenario::PgBouncerRestart => Some(postgres.pgbouncer().await),
        _ => None,
    };
    let silo_urls: Vec<String> = database_urls
        .iter()
        .map(|url| bouncer.as_ref().map_or(url.clone(), |b| b.url_for(url)))
        .collect();
    let dir = std::env::temp_dir().join(format!(
        "outbox-chaos-{}-{}",
        std::process::id(),
        scenario.name()
    ));
    let mut silos = Silos::start(&dir, &silo_urls, None).await;
    if scenario == Scenario::Pause {
        // Two processes per region, on the region's database.
        for region in &SILOS[1..] {
            silos.start_twin(region).await;
        }
    }
    let urls = Urls {
        control: silos.url_of("control"),
        regions: silos
            .region_processes()
            .into_iter()
            .map(|i| (silos.name(i).to_owned(), silos.url(i)))
            .collect(),
    };
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut stage = Stage {
        postgres,
        silos,
        urls,
        ledger,
        database_urls,
        bouncer,
        rng: StdRng::seed_from_u64(seed ^ scenario as u64),
        seed,
        progress: Progress::default(),
        tally: Tally::default(),
        failed: Vec::new(),
    };

    let load = Load::start(&stage.urls, &stage.ledger, &stage.progress, WRITERS, seed);
    let description = match stage.warm_up().await {
        Ok(()) => stage.faults(scenario, scale).await,
        Err(stalled) => Err(stalled),
    };
    let description = description.unwrap_or_else(|stalled| {
        stage.failed.push(format!("the load stalled: {stalled}"));
        format!("{} (stopped: the load stalled)", scenario.name())
    });
    let fault_end = Instant::now();
    let steady = load.stop().await;
    stage.tally.merge(steady);
    // Only the faults that take the database away may answer 5xx.
    let server_errors = stage.tally.server_errors();
    if server_errors > 0 && !scenario.faults_may_answer_5xx() {
        stage.failed.push(format!(
            "{server_errors} requests answered 5xx ({}), which this scenario's faults never cause",
            stage.tally
        ));
    }

    // Convergence: every outbox empty, every replica equal to its source.
    // Nothing to await across three databases: polled.
    let checks: Vec<DatabaseConnection> = databases.into_iter().map(|(_, db)| db).collect();
    let (converged, unconverged) = loop {
        let snapshot = Snapshot::take(&checks, false).await;
        if snapshot.converged() {
            break (Some(fault_end.elapsed()), None);
        }
        let waited = fault_end.elapsed();
        if waited > CONVERGENCE_BOUND {
            let stale = snapshot.stale();
            break (
                None,
                Some(format!(
                    "after {:.1} s, {} outbox rows pending, {} stale replicas, e.g. {:?}",
                    waited.as_secs_f64(),
                    snapshot.pending,
                    stale.len(),
                    &stale[..stale.len().min(3)]
                )),
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await; // poll interval
    };
    let snapshot = Snapshot::take(&checks, true).await;
    let lost = stage.ledger.lock().unwrap().lost(&snapshot);
    let description = if scenario == Scenario::Pause {
        // What the fences did: deliveries of paused workers that arrived
        // after a newer claim's, refused by the receiving silo's inbox.
        format!(
            "{description}; {} late deliveries refused as superseded",
            superseded(&checks).await
        )
    } else {
        description
    };
    let mut row = Row {
        scenario: description,
        acknowledged: stage.tally.acknowledged,
        lost,
        stale: snapshot.stale(),
        duplicated: snapshot.duplicated(),
        client_errors: stage.tally.to_string(),
        converged,
        unconverged,
        failed: std::mem::take(&mut stage.failed),
        logs: None,
    };
    let Stage { silos, bouncer, .. } = stage;
    if row.violations().is_empty() {
        silos.stop();
    } else {
        row.logs = Some(format!(
            "logs kept in {}:\n{}",
            silos.log_dir().display(),
            silos.log_tails()
        ));
        drop(silos);
    }
    drop(bouncer);
    for db in checks {
        let _ = db.close().await;
    }
    row
}

/// Deliveries refused as superseded by the silos' fenced inboxes, in all.
async fn superseded(dbs: &[DatabaseConnection]) -> u64 {
    let mut total = 0;
    for db in dbs {
        let (_, refused) = outbox_seaorm::inbox::fences(db, 0).await.unwrap();
        total += refused;
    }
    total
}

impl Stage<'_> {
    /// Before the first fault: the load gets through.
    async fn warm_up(&self) -> Result<(), String> {
        self.progress
            .acknowledged("writes acknowledged before the first fault", WARM_UP)
            .await
    }

    /// Between faults: a number of acknowledged writes drawn from the seed.
    async fn gap(&mut self) -> Result<(), String> {
        let writes = self.rng.random_range(BETWEEN_FAULTS);
        self.progress
            .acknowledged("writes acknowledged between faults", writes)
            .await
    }

    /// Until requests have waited on the `rows` locker's locks (at least
    /// `requests` at once) and deliveries on the `table` locker's (at least
    /// `deliveries` at once): the fault at work. (A wait for the writers'
    /// progress could end only with their timeouts: requests waiting on the
    /// locks hold their shards' locks and their pool's connections, which
    /// every writer soon waits for.) A lock wait shows only in
    /// `pg_stat_activity`: polled.
    async fn held_up(
        &self,
        (rows, requests): (i32, i64),
        (table, deliveries): (i32, i64),
    ) -> Result<(), String> {
        let started = Instant::now();
        let (mut most_requests, mut most_deliveries) = (0, 0);
        loop {
            most_requests = most_requests.max(self.postgres.blocked_by(&[rows]).await);
            most_deliveries = most_deliveries.max(self.postgres.blocked_by(&[table]).await);
            if most_requests >= requests && most_deliveries >= deliveries {
                return Ok(());
            }
            if started.elapsed() > STALL_BOUND {
                return Err(format!(
                    "held for {:.1} s (bound {:.0} s, two client timeouts): at most \
                     {most_requests} requests waited on the rows at once and \
                     {most_deliveries} deliveries on the table (wanted {requests} and \
                     {deliveries})",
                    started.elapsed().as_secs_f64(),
                    STALL_BOUND.as_secs_f64()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await; // poll interval
        }
    }

    /// Injects the scenario's faults; returns its description, or why the
    /// load stalled.
    async fn faults(&mut self, scenario: Scenario, scale: Scale) -> Result<String, String> {
        let gaps = format!(
            "each {}–{} acknowledged writes after the last",
            BETWEEN_FAULTS.start,
            BETWEEN_FAULTS.end - 1
        );
        match scenario {
            Scenario::Sigkill => {
                let kills = scale.pick(3, 10);
                let down = 3..15;
                for _ in 0..kills {
                    self.gap().await?;
                    let silo = self.rng.random_range(0..SILOS.len());
                    self.silos.kill(silo);
                    // Down until the load has run into it.
                    let failures = self.rng.random_range(down.clone());
                    let target = self.progress.now().failed + failures;
                    self.progress
                        .reach("requests failed with a silo down", |c| c.failed, target)
                        .await?;
                    self.silos.restart(silo).await;
                }
                Ok(format!(
                    "SIGKILL of a random silo, {kills} times, {gaps}; restarted once {}–{} \
                     requests had failed",
                    down.start,
                    down.end - 1
                ))
            }
            Scenario::CrashRestart => {
                let restarts = scale.pick(2, 4);
                for _ in 0..restarts {
                    self.gap().await?;
                    self.postgres.crash_restart().await;
                }
                Ok(format!(
                    "`pg_ctl restart -m immediate`, {restarts} times, {gaps}"
                ))
            }
            Scenario::TerminateStorm => {
                let storms = scale.pick(10, 20);
                let between = 2..10;
                let mut terminated = 0;
                for _ in 0..storms {
                    terminated += self.postgres.terminate_backends(&self.database_urls).await;
                    // The next once writes get through again.
                    let writes = self.rng.random_range(between.clone());
                    self.progress
                        .acknowledged("writes acknowledged between terminations", writes)
                        .await?;
                }
                Ok(format!(
                    "`pg_terminate_backend` of every backend, {storms} times, each {}–{} \
                     acknowledged writes after the last ({terminated} terminated)",
                    between.start,
                    between.end - 1
                ))
            }
            Scenario::IdleLockers => {
                self.gap().await?;
                // Rows of `us` that writers rename, and the table Control
                // writes replicated organizations into.
                let rows = Locker::hold(
                    &self.database_urls[1],
                    &["SELECT id FROM organization ORDER BY id LIMIT 20 FOR UPDATE"],
                )
                .await;
                let table = Locker::hold(
                    &self.database_urls[0],
                    &["LOCK TABLE organization_mapping IN SHARE ROW EXCLUSIVE MODE"],
                )
                .await;
                let held = Instant::now();
                // Held until requests wait on the rows and deliveries to
                // Control on the table.
                let (requests, deliveries) =
                    (self.rng.random_range(1..4), self.rng.random_range(1..4));
                let outcome = self
                    .held_up((rows.pid, requests), (table.pid, deliveries))
                    .await;
                if scale == Scale::Long {
                    // Longer than the delivery timeout, so that deliveries
                    // to Control time out and back off: a time by
                    // definition, which a loaded machine only lengthens.
                    let floor = DEFAULT_DELIVERY_TIMEOUT * 2;
                    tokio::time::sleep(floor.saturating_sub(held.elapsed())).await;
                }
                rows.release().await;
                table.release().await;
                outcome?;
                Ok(format!(
                    "two sessions idle in transaction holding row and table locks, from {}–{} \
                     acknowledged writes on until {requests} requests waited on the rows and \
                     {deliveries} deliveries on the table{} ({:.1} s)",
                    BETWEEN_FAULTS.start,
                    BETWEEN_FAULTS.end - 1,
                    if scale == Scale::Long {
                        " and for twice the delivery timeout"
                    } else {
                        ""
                    },
                    held.elapsed().as_secs_f64()
                ))
            }
            Scenario::LoadWaves => {
                let waves = scale.pick(3, 5);
                let size = 200;
                for wave in 0..waves as usize {
                    let tally = load::wave(
                        &self.urls,
                        &self.ledger,
                        &self.progress,
                        size,
                        1_000 + wave * size,
                        self.seed,
                    )
                    .await;
                    self.tally.merge(tally);
                }
                Ok(format!(
                    "{waves} waves of {size} concurrent requests on pools of 10"
                ))
            }
            Scenario::Pause => {
                let pauses = scale.pick(2, 7);
                let served = 3..10;
                let (mut creates, mut slowest) = (0, Duration::ZERO);
                for _ in 0..pauses {
                    self.gap().await?;
                    let processes = self.silos.region_processes();
                    let paused = processes[self.rng.random_range(0..processes.len())];
                    let region = self.silos.name(paused);
                    // The region's other process, which must keep serving.
                    let other = processes
                        .into_iter()
                        .find(|&i| i != paused && self.silos.name(i) == region)
                        .unwrap();
                    self.silos.pause(paused);
                    let probe = Probe::start(self.silos.url(other));
                    // The paused process's leases run out and the other
                    // process polls at least once after (the takeover):
                    // times by definition, on the clock, which a loaded
                    // machine only lengthens. Then the other process serves
                    // creates meanwhile: a create that waited for the
                    // paused process would stall the probe until the
                    // resume, which never comes first.
                    tokio::time::sleep(DEFAULT_LEASE + POLL_INTERVAL).await;
                    let more = self.rng.random_range(served.clone());
                    let target = probe.progress.now().acknowledged + more;
                    let probed = probe
                        .progress
                        .reach(
                            &format!("creates through the other process of paused {region}"),
                            |c| c.acknowledged,
                            target,
                        )
                        .await;
                    self.silos.resume(paused);
                    let outcome = probe.stop().await;
                    creates += outcome.creates.len();
                    slowest = slowest.max(outcome.quantile(1.0));
                    if let Err(stalled) = probed {
                        self.failed.push(stalled);
                    }
                    for failure in outcome.failures.iter().take(3) {
                        self.failed.push(format!(
                            "a create through the other process of {region} failed during a \
                             pause: {failure}"
                        ));
                    }
                }
                Ok(format!(
                    "SIGSTOP of a random region process (two per region), {pauses} times, \
                     {gaps}; resumed once the lease and a poll had passed and the other process \
                     had served {}–{} more creates ({creates} in all, the slowest {:.2} s)",
                    served.start,
                    served.end - 1,
                    slowest.as_secs_f64()
                ))
            }
            Scenario::Slowloris => {
                let connections = scale.pick(300, 800) as usize;
                self.gap().await?;
                let base = self.silos.url_of("us");
                let addr = base.trim_start_matches("http://").parse().unwrap();
                let outcome = crate::slowloris::attack(addr, base, connections).await;
                let (failed, line) = crate::slowloris::check(&outcome);
                self.failed.extend(failed);
                Ok(line)
            }
            Scenario::PgBouncerRestart => {
                let restarts = scale.pick(2, 5);
                for _ in 0..restarts {
                    self.gap().await?;
                    let bouncer = self.bouncer.as_mut().unwrap();
                    tokio::task::block_in_place(|| bouncer.restart()).unwrap();
                }
                Ok(format!(
                    "behind PgBouncer (session mode), restarted {restarts} times, {gaps}"
                ))
            }
        }
    }
}
