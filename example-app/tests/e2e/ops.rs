//! The alerting rules and the Grafana board under `ops/`: `promtool` checks
//! the rules and runs their unit tests, and every series a rule or a panel
//! names is one the example's `/metrics` exports after real traffic (on
//! PostgreSQL, where the vacuum gauges exist too).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use reqwest::StatusCode;
use sea_orm::DbBackend;
use serde_json::{json, Value};

use super::deployment::{fresh_client, Deployment, VIEWER_TOKEN};

fn ops_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../ops")
}

fn promtool(dir: &Path, args: &[&str]) -> Output {
    Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "promtool: {error}; ./scripts/test.sh installs it (Debian's `prometheus` package)"
            )
        })
}

fn succeeded(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_alerting_rules_pass_promtool_and_their_unit_tests() {
    let dir = ops_dir().join("prometheus");
    let checked = promtool(&dir, &["check", "rules", "outbox-alerts.yml"]);
    succeeded(&checked, "promtool check rules");
    assert!(String::from_utf8_lossy(&checked.stdout).contains("SUCCESS: 10 rules found"));
    succeeded(
        &promtool(&dir, &["test", "rules", "outbox-alerts.test.yml"]),
        "promtool test rules",
    );
}

/// The `outbox_…` names in a PromQL expression.
fn series_in(expression: &str) -> impl Iterator<Item = String> + '_ {
    expression
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|token| token.starts_with("outbox_"))
        .map(str::to_owned)
}

/// The expressions of a rules file: each `expr:` value, a block scalar
/// (`expr: |`) with its more indented lines.
fn rule_expressions(rules: &str) -> Vec<String> {
    let mut expressions = Vec::new();
    let mut lines = rules.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(rest) = line.trim_start().strip_prefix("expr:") else {
            continue;
        };
        let indent = line.len() - line.trim_start().len();
        if rest.trim() == "|" {
            let mut block = String::new();
            while let Some(next) = lines.peek() {
                if next.len() - next.trim_start().len() <= indent && !next.trim().is_empty() {
                    break;
                }
                block.push_str(next);
                block.push('\n');
                lines.next();
            }
            expressions.push(block);
        } else {
            expressions.push(rest.trim().to_owned());
        }
    }
    expressions
}

/// Every `expr` and templating query of a Grafana board.
fn board_expressions(board: &Value) -> Vec<String> {
    let panels = board["panels"].as_array().unwrap();
    assert!(!panels.is_empty());
    let mut expressions = Vec::new();
    for panel in panels {
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "a panel without a query: {panel}");
        expressions.extend(
            targets
                .iter()
                .map(|t| t["expr"].as_str().unwrap().to_owned()),
        );
    }
    for variable in board["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["definition"].as_str() {
            expressions.push(query.to_owned());
        }
    }
    expressions
}

/// The series names of a Prometheus text exposition.
fn exported(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_of_the_rules_and_the_board_is_exported() {
    let rules = std::fs::read_to_string(ops_dir().join("prometheus/outbox-alerts.yml")).unwrap();
    let board: Value = serde_json::from_str(
        &std::fs::read_to_string(ops_dir().join("grafana/outbox-dashboard.json")).unwrap(),
    )
    .unwrap();
    let rule_series: BTreeSet<String> = rule_expressions(&rules)
        .iter()
        .flat_map(|e| series_in(e).collect::<Vec<_>>())
        .collect();
    let board_series: BTreeSet<String> = board_expressions(&board)
        .iter()
        .flat_map(|e| series_in(e).collect::<Vec<_>>())
        .collect();
    // The parsers found what the files hold (a parser that finds nothing
    // would pass the check below).
    assert_eq!(rule_expressions(&rules).len(), 10);
    assert!(
        rule_series.contains("outbox_dead_lettered"),
        "{rule_series:?}"
    );
    assert!(
        board_series.contains("outbox_table_dead_tuples"),
        "{board_series:?}"
    );

    let app = Deployment::start(DbBackend::Postgres).await;
    // Real traffic through both kinds of outbox: a region's organization
    // reaches Control, a Control user reaches a region.
    let org = app.create_org("us", "observed", "Observed").await;
    let (status, user, _) = app
        .send(
            reqwest::Method::POST,
            app.control_url("/api/0/users"),
            Some(json!({ "email": "ops@example.com", "name": "Ops" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{user}");
    let (status, member, _) = app
        .send(
            reqwest::Method::POST,
            app.region_url("us", &format!("/api/0/organizations/{org}/members")),
            Some(json!({ "user_id": user["id"], "role": "owner" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{member}");
    let scrape = || async {
        let response = fresh_client()
            .get(app.region_url("us", "/metrics"))
            .bearer_auth(VIEWER_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.text().await.unwrap()
    };
    let wanted: BTreeSet<String> = rule_series.union(&board_series).cloned().collect();
    // The gauges are published by each worker as it starts, then every 15
    // s; the histograms with their first delivery.
    let mut text = scrape().await;
    for _ in 0..600 {
        if wanted.is_subset(&exported(&text)) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        text = scrape().await;
    }
    let found = exported(&text);
    let missing: Vec<&String> = wanted.difference(&found).collect();
    assert!(
        missing.is_empty(),
        "not exported within 30 s: {missing:?}\n{text}"
    );
    app.shutdown().await;
}
