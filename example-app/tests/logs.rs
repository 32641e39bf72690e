//! The binary's log lines as a log collector sees them: its standard output
//! is a pipe here, so text logs carry no ANSI colour codes, and
//! `--log-format json` writes one JSON object per log line.

#![allow(clippy::unwrap_used, missing_docs)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Stops the child however the test ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the three silos on free ports over SQLite files in a temporary
/// directory, with `extra` arguments, and returns every line the process
/// wrote to its standard output up to (and with) the third
/// `silo started` log line.
fn lines_until_started(extra: &[&str]) -> Vec<String> {
    let data =
        std::env::temp_dir().join(format!("outbox-example-logs-{:08x}", rand::random::<u32>()));
    let mut command = Command::new(env!("CARGO_BIN_EXE_example-app"));
    for var in [
        "SILO",
        "SILO_SECRET",
        "DATA_DIR",
        "OUTBOX_ADMIN_TOKEN",
        "LOG_FORMAT",
    ] {
        command.env_remove(var);
    }
    command
        .env("RUST_LOG", "info")
        .args(["--control-addr", "127.0.0.1:0", "--us-addr", "127.0.0.1:0"])
        .args(["--de-addr", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = Running(command.spawn().unwrap());
    let stdout = child.0.stdout.take().unwrap();
    let (sender, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if sender.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut started = 0;
    while started < 3 {
        // A bound for a process that never gets there, not a wait for it.
        let line = lines
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("{e}; the output so far:\n{}", seen.join("\n")));
        started += usize::from(line.contains("silo started"));
        seen.push(line);
    }
    drop(child);
    let _ = std::fs::remove_dir_all(&data);
    seen
}

#[test]
fn text_logs_to_a_pipe_have_no_colour_codes() {
    let lines = lines_until_started(&[]);
    let all = lines.join("\n");
    assert!(!all.contains('\u{1b}'), "ANSI escape in:\n{all}");
    assert!(all.contains(" INFO "), "{all}");
}

/// Whether `line` is one of the lines the binary prints itself, beside its
/// logs, when it starts: the silos' addresses, the dashboard's, where the
/// admin token is, `Ctrl-C to stop` (`src/main.rs`). Each is matched whole,
/// so that no log line passes for one.
fn is_banner(line: &str) -> bool {
    let address = |rest: &str| {
        rest.strip_prefix("http://127.0.0.1:")
            .and_then(|rest| rest.split('/').next())
            .is_some_and(|port| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
    };
    ["control    ", "region us  ", "region de  "]
        .iter()
        .any(|silo| line.strip_prefix(silo).is_some_and(address))
        || line.strip_prefix("dashboard  ").is_some_and(|rest| {
            address(rest) && rest.ends_with("/admin/outbox/dashboard (log in with the admin token)")
        })
        || line.starts_with("admin API  /admin/outbox on every silo")
        || line == "Ctrl-C to stop"
}

#[test]
fn json_logs_are_one_object_a_line() {
    let lines = lines_until_started(&["--log-format", "json"]);
    // Every line but the binary's own banner is one JSON object, whole.
    let logs: Vec<serde_json::Value> = lines
        .iter()
        .filter(|line| !is_banner(line))
        .map(
            |line| match serde_json::from_str::<serde_json::Value>(line) {
                Ok(log) if log.is_object() => log,
                Ok(other) => panic!("a log line that is not a JSON object ({other}): {line}"),
                Err(e) => panic!("a log line that is not one JSON object ({e}): {line}"),
            },
        )
        .collect();
    assert!(
        logs.len() < lines.len(),
        "the banner is the binary's own (`src/main.rs`): {lines:#?}"
    );
    let started: Vec<&serde_json::Value> = logs
        .iter()
        .filter(|log| log["fields"]["message"] == "silo started")
        .collect();
    assert_eq!(started.len(), 3, "{lines:#?}");
    for log in started {
        assert_eq!(log["level"], "INFO");
        assert!(log["fields"]["addr"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:"));
    }
    assert!(!lines.join("\n").contains('\u{1b}'));
}
