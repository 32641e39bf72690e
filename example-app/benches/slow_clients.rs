//! How fast a silo serves a client while hundreds of slow clients hold
//! connections open (slowloris: a request head a byte every 100 ms, never
//! finished), against the same client alone, measured in the same run.
//!
//! Run with `cargo bench -p example-app --bench slow_clients`
//! (`OUTBOX_BENCH_CONNECTIONS=300,800` by default: the chaos suite's bounded
//! and long forms). Starts a PostgreSQL cluster of its own and the three
//! silos as processes (the chaos suite's), then, for each number of slow
//! connections: a client creates organizations on `us` one after the other
//! alone (the baseline, as many creates as the attack lasts for at most
//! 100), then the same while the slow connections are open until the silo
//! closes them (its 5 s header timeout). Prints a Markdown table of the
//! creates' p50 and p99, and their ratio to the baseline's.
//!
//! The chaos suite's `slowloris` scenario checks what must hold (every slow
//! connection closed after the timeout, the client served while they are
//! open); this bench measures how much the slow clients cost.

#![allow(missing_docs, clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../tests/chaos/ledger.rs"]
mod ledger;
#[allow(dead_code)]
#[path = "../tests/chaos/load.rs"]
mod load;
#[allow(dead_code)]
#[path = "../tests/chaos/postgres.rs"]
mod postgres;
#[allow(dead_code)]
#[path = "../tests/chaos/silos.rs"]
mod silos;
#[allow(dead_code)]
#[path = "../tests/chaos/slowloris.rs"]
mod slowloris;

use std::time::Duration;

use load::{Probe, ProbeOutcome};

/// Creates of the baseline, at most.
const BASELINE_CREATES: usize = 100;

fn main() {
    let connections: Vec<usize> = std::env::var("OUTBOX_BENCH_CONNECTIONS")
        .unwrap_or_else(|_| "300,800".to_owned())
        .split(',')
        .map(|n| {
            n.trim()
                .parse()
                .expect("OUTBOX_BENCH_CONNECTIONS: numbers, comma-separated")
        })
        .collect();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run(&connections));
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1_000.0)
}

fn ratio(numerator: Duration, denominator: Duration) -> String {
    if denominator.is_zero() {
        return "–".to_owned();
    }
    format!(
        "{:.2}×",
        numerator.as_secs_f64() / denominator.as_secs_f64()
    )
}

async fn run(connections: &[usize]) {
    let postgres = postgres::Postgres::start().await;
    let databases = postgres.databases("bench").await;
    let urls: Vec<String> = databases.iter().map(|(url, _)| url.clone()).collect();
    let dir = std::env::temp_dir().join(format!("outbox-bench-slow-{}", std::process::id()));
    let silos = silos::Silos::start(&dir, &urls, None).await;
    let base = silos.url_of("us");
    let addr = base.trim_start_matches("http://").parse().unwrap();

    let mut table = String::from(
        "| slow connections | creates | p50 | p99 | p50 ÷ alone | p99 ÷ alone | slow connections closed after |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for &count in connections {
        let attacked = slowloris::attack(addr, base.clone(), count).await;
        let creates = attacked.client.creates.len().clamp(1, BASELINE_CREATES);
        let alone = alone(&base, creates).await;
        let (_, earliest, latest) = attacked.closes();
        let row = |label: &str, outcome: &ProbeOutcome, closes: &str| {
            format!(
                "| {label} | {} | {} | {} | {} | {} | {closes} |\n",
                outcome.creates.len(),
                ms(outcome.quantile(0.5)),
                ms(outcome.quantile(0.99)),
                ratio(outcome.quantile(0.5), alone.quantile(0.5)),
                ratio(outcome.quantile(0.99), alone.quantile(0.99)),
            )
        };
        table.push_str(&row("none (the baseline)", &alone, "–"));
        table.push_str(&row(
            &count.to_string(),
            &attacked.client,
            &format!(
                "{:.1}–{:.1} s",
                earliest.as_secs_f64(),
                latest.as_secs_f64()
            ),
        ));
        for failure in attacked.client.failures.iter().take(3) {
            eprintln!("a create under {count} slow connections failed: {failure}");
        }
    }
    silos.stop();
    drop(databases);
    drop(postgres);
    println!("\n{table}");
}

/// `creates` creates by the client alone.
async fn alone(base: &str, creates: usize) -> ProbeOutcome {
    let probe = Probe::start(base.to_owned());
    probe
        .progress
        .reach("creates of the baseline", |c| c.acknowledged, creates)
        .await
        .unwrap();
    probe.stop().await
}
