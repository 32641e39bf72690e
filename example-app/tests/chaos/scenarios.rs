//! The scenarios: set-up, faults under load, convergence, checks.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sea_orm::DatabaseConnection;

use crate::ledger::{Ledger, Snapshot};
use crate::load::{self, Load, Tally, Urls};
use crate::postgres::{Locker, Postgres};
use crate::silos::{Silos, SILOS};

/// Concurrent writers of the steady load.
const WRITERS: usize = 6;
/// Load before the first fault.
const WARM_UP: Duration = Duration::from_secs(1);
/// The bound on convergence after the last fault.
const CONVERGENCE_BOUND: Duration = Duration::from_secs(5);
/// How long the suite waits for convergence before it gives up.
const CONVERGENCE_DEADLINE: Duration = Duration::from_secs(60);
/// Acknowledged writes per second of load below which a scenario fails: a
/// load that got (almost) nothing through proves nothing about loss.
const MIN_ACKNOWLEDGED_PER_SECOND: f64 = 5.0;

/// How much chaos.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// A few minutes in all, in the test command.
    Bounded,
    /// As in the chaos run the suite reproduces.
    Long,
}

impl Scale {
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
        match self.converged {
            None => violations.push(format!(
                "{name}: not converged within {CONVERGENCE_DEADLINE:?} of the last fault: {}",
                self.unconverged.as_deref().unwrap_or("")
            )),
            Some(after) if after > CONVERGENCE_BOUND => violations.push(format!(
                "{name}: converged {:.1} s after the last fault (bound {CONVERGENCE_BOUND:?})",
                after.as_secs_f64()
            )),
            Some(_) => {}
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
         | scenario | acknowledged writes | lost | stale | duplicated | client errors | converged after the last fault |\n\
         |---|---|---|---|---|---|---|\n"
    );
    for row in rows {
        let converged = row.converged.map_or_else(
            || format!("not within {} s", CONVERGENCE_DEADLINE.as_secs()),
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
        tally: Tally::default(),
        failed: Vec::new(),
    };

    let load = Load::start(&stage.urls, &stage.ledger, WRITERS, seed);
    let load_started = std::time::Instant::now();
    tokio::time::sleep(WARM_UP).await;
    let (description, fault_end) = stage.faults(scenario, scale).await;
    let steady = load.stop().await;
    let load_seconds = load_started.elapsed().as_secs_f64();
    stage.tally.merge(steady);
    // The load itself must have run, and only the faults that take the
    // database away may answer 5xx.
    let rate = stage.tally.acknowledged as f64 / load_seconds;
    if rate < MIN_ACKNOWLEDGED_PER_SECOND {
        stage.failed.push(format!(
            "only {} writes acknowledged in {load_seconds:.0} s of load ({rate:.1}/s, floor \
             {MIN_ACKNOWLEDGED_PER_SECOND}/s): the load did not get through",
            stage.tally.acknowledged
        ));
    }
    let server_errors = stage.tally.server_errors();
    if server_errors > 0 && !scenario.faults_may_answer_5xx() {
        stage.failed.push(format!(
            "{server_errors} requests answered 5xx ({}), which this scenario's faults never cause",
            stage.tally
        ));
    }

    // Convergence: every outbox empty, every replica equal to its source.
    let checks: Vec<DatabaseConnection> = databases.into_iter().map(|(_, db)| db).collect();
    let (converged, unconverged) = loop {
        let snapshot = Snapshot::take(&checks, false).await;
        if snapshot.converged() {
            break (Some(fault_end.elapsed()), None);
        }
        if fault_end.elapsed() > CONVERGENCE_DEADLINE {
            let stale = snapshot.stale();
            break (
                None,
                Some(format!(
                    "{} outbox rows pending, {} stale replicas, e.g. {:?}",
                    snapshot.pending,
                    stale.len(),
                    &stale[..stale.len().min(3)]
                )),
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
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
    /// A pause between faults, under load.
    async fn gap(&mut self, seconds: std::ops::Range<f64>) {
        let pause = self.rng.random_range(seconds);
        tokio::time::sleep(Duration::from_secs_f64(pause)).await;
    }

    /// Injects the scenario's faults; returns its description and when the
    /// last fault ended.
    async fn faults(&mut self, scenario: Scenario, scale: Scale) -> (String, Instant) {
        match scenario {
            Scenario::Sigkill => {
                let kills = scale.pick(3, 10);
                for _ in 0..kills {
                    self.gap(1.0..2.5).await;
                    let silo = self.rng.random_range(0..SILOS.len());
                    self.silos.kill(silo);
                    self.gap(0.3..1.0).await;
                    self.silos.restart(silo).await;
                }
                (
                    format!("SIGKILL of a random silo, {kills} times, restarted after 0.3–1 s"),
                    Instant::now(),
                )
            }
            Scenario::CrashRestart => {
                let restarts = scale.pick(2, 4);
                for _ in 0..restarts {
                    self.gap(1.5..2.5).await;
                    self.postgres.crash_restart().await;
                }
                (
                    format!("`pg_ctl restart -m immediate`, {restarts} times"),
                    Instant::now(),
                )
            }
            Scenario::TerminateStorm => {
                let seconds = scale.pick(5, 10);
                let started = Instant::now();
                let mut terminated = 0;
                while started.elapsed() < Duration::from_secs(seconds.into()) {
                    terminated += self.postgres.terminate_backends(&self.database_urls).await;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                (
                    format!(
                        "`pg_terminate_backend` of every backend every 0.5 s for {seconds} s \
                         ({terminated} terminated)"
                    ),
                    Instant::now(),
                )
            }
            Scenario::IdleLockers => {
                let seconds = scale.pick(6, 20);
                self.gap(0.5..1.0).await;
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
                tokio::time::sleep(Duration::from_secs(seconds.into())).await;
                rows.release().await;
                table.release().await;
                (
                    format!(
                        "two sessions idle in transaction holding row and table locks for {seconds} s"
                    ),
                    Instant::now(),
                )
            }
            Scenario::LoadWaves => {
                let waves = scale.pick(3, 5);
                let size = 200;
                for wave in 0..waves as usize {
                    let tally = load::wave(
                        &self.urls,
                        &self.ledger,
                        size,
                        1_000 + wave * size,
                        self.seed,
                    )
                    .await;
                    self.tally.merge(tally);
                }
                (
                    format!("{waves} waves of {size} concurrent requests on pools of 10"),
                    Instant::now(),
                )
            }
            Scenario::Pause => {
                let pauses = scale.pick(2, 7);
                let mut slowest = Duration::ZERO;
                for _ in 0..pauses {
                    self.gap(0.5..1.5).await;
                    let processes = self.silos.region_processes();
                    let paused = processes[self.rng.random_range(0..processes.len())];
                    let region = self.silos.name(paused);
                    // The region's other process, which must keep serving.
                    let other = processes
                        .into_iter()
                        .find(|&i| i != paused && self.silos.name(i) == region)
                        .unwrap();
                    let seconds = self.rng.random_range(4.0..8.0);
                    self.silos.pause(paused);
                    let probe = load::probe_creates(
                        self.silos.url(other),
                        Duration::from_secs_f64(seconds),
                    );
                    let (probed, _) =
                        tokio::join!(probe, tokio::time::sleep(Duration::from_secs_f64(seconds)));
                    self.silos.resume(paused);
                    match probed {
                        Ok(latency) => slowest = slowest.max(latency),
                        Err(error) => self.failed.push(format!(
                            "a create through the other process of {region} failed \
                             during a pause: {error}"
                        )),
                    }
                }
                // Half the lease: a create that waited for the paused
                // process's claims would wait for the lease to run out.
                let bound = outbox_core::drain::DEFAULT_LEASE / 2;
                if slowest >= bound {
                    self.failed.push(format!(
                        "a create through the other process of a paused one took {:.2} s \
                         (bound {:.1} s, half the lease)",
                        slowest.as_secs_f64(),
                        bound.as_secs_f64()
                    ));
                }
                (
                    format!(
                        "SIGSTOP of a random region process (two per region) for 4–8 s, \
                         {pauses} times; the other process's slowest create meanwhile {:.2} s",
                        slowest.as_secs_f64()
                    ),
                    Instant::now(),
                )
            }
            Scenario::Slowloris => {
                let connections = scale.pick(300, 800) as usize;
                self.gap(0.5..1.0).await;
                let base = self.silos.url_of("us");
                let addr = base.trim_start_matches("http://").parse().unwrap();
                let outcome = crate::slowloris::attack(addr, base, connections).await;
                let (failed, line) = crate::slowloris::check(&outcome);
                self.failed.extend(failed);
                (line, Instant::now())
            }
            Scenario::PgBouncerRestart => {
                let restarts = scale.pick(2, 5);
                for _ in 0..restarts {
                    self.gap(1.5..2.5).await;
                    let bouncer = self.bouncer.as_mut().unwrap();
                    tokio::task::block_in_place(|| bouncer.restart()).unwrap();
                }
                (
                    format!("behind PgBouncer (session mode), restarted {restarts} times"),
                    Instant::now(),
                )
            }
        }
    }
}
