#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs what is missing
# (PostgreSQL server binaries, PgBouncer, Chromium and chromedriver, NATS
# server, promtool, Node.js with the AsyncAPI parser), then
# tests each crate of the workspace on its own, `cargo test -p <crate>
# --locked`, against real PostgreSQL (a throwaway cluster, unless
# DATABASE_URL is set) and SQLite.
#
# One crate at a time, not `cargo test --workspace`: a workspace build turns on,
# for every crate, the features any crate asks of a dependency, so a crate (or
# a doctest) that only compiles thanks to another crate's features passes
# there and fails for its users. Every crate runs even when one fails; the
# script then exits non-zero.
#
# Arguments go to every `cargo test` (a test name filter, `-- --nocapture`),
# except `-p <crate>` / `--package <crate>`, which pick the crates to run.
#
# A crate with default features is tested a second time without them
# (`--no-default-features`), on the targets that must work without them
# only (see `without_defaults`): the rest ran in the first pass, which
# covers the same code. Skipped when the arguments pick targets.
# OUTBOX_TEST_KEEP_CLUSTER=1 keeps the throwaway cluster (and the databases of
# failing tests) after the run instead of removing it.
set -euo pipefail
cd "$(dirname "$0")/.."

have_postgres() {
  command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}

have_pgbouncer() {
  command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]
}

have_nats_server() {
  command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ]
}

missing=()
# Even with DATABASE_URL: the chaos suite crash-restarts a server of its own.
if ! have_postgres; then missing+=(postgresql); fi
# The tests start PgBouncer themselves, in front of the test server.
if ! have_pgbouncer; then missing+=(pgbouncer); fi
# The dashboard's browser test drives Debian's Chromium through chromedriver,
# which it starts and stops itself.
if ! command -v chromium >/dev/null 2>&1; then missing+=(chromium); fi
if ! command -v chromedriver >/dev/null 2>&1; then missing+=(chromium-driver); fi
# The JetStream sink's tests (outbox-core, outbox-axum) and the README's
# example start Debian's nats-server with JetStream themselves, and kill and
# restart it; without it they fail (they never skip).
if ! have_nats_server; then missing+=(nats-server); fi
# The alerting rules under ops/ are checked and unit-tested by promtool
# (example-app's e2e test `ops`), which Debian ships in `prometheus`.
if ! command -v promtool >/dev/null 2>&1; then missing+=(prometheus); fi
# The registry's AsyncAPI document (outbox-core's test `asyncapi`) is
# validated by the `@asyncapi/parser` npm package, run with Node.js.
if ! command -v node >/dev/null 2>&1; then missing+=(nodejs); fi
if ! command -v npm >/dev/null 2>&1; then missing+=(npm); fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "not found: ${missing[*]}: installing" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  # The packages' services (postgresql, pgbouncer, nats-server, prometheus)
  # must not start on install: the tests start the servers they need and
  # stop them; a policy-rc.d that denies every start, unless one is there.
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
  fi
  installed=0
  { $SUDO apt-get update &&
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"; } ||
    installed=$?
  if [ -n "$policy" ]; then $SUDO rm -f "$policy"; fi
  if [ "$installed" -ne 0 ]; then exit "$installed"; fi
fi

# The AsyncAPI parser, installed once per target directory (the test
# installs it there itself when this is not set).
if [ -z "${OUTBOX_ASYNCAPI_PARSER_DIR:-}" ]; then
  target_dir=$(cargo metadata --format-version 1 --no-deps --locked |
    grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
  export OUTBOX_ASYNCAPI_PARSER_DIR="$target_dir/asyncapi-parser"
fi
if [ ! -f "$OUTBOX_ASYNCAPI_PARSER_DIR/node_modules/@asyncapi/parser/package.json" ]; then
  mkdir -p "$OUTBOX_ASYNCAPI_PARSER_DIR"
  npm install --no-audit --no-fund --silent --prefix "$OUTBOX_ASYNCAPI_PARSER_DIR" @asyncapi/parser@3.6.6
fi

# `-p`/`--package` pick crates; everything else goes to each `cargo test`.
crates=()
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --) args+=("$@"); break ;;
    -p | --package) crates+=("$2"); shift 2 ;;
    -p*) crates+=("${1#-p}"); shift ;;
    --package=*) crates+=("${1#--package=}"); shift ;;
    *) args+=("$1"); shift ;;
  esac
done
if [ ${#crates[@]} -eq 0 ]; then
  # Every workspace member (with --no-deps, `packages` holds only those).
  mapfile -t crates < <(cargo metadata --no-deps --format-version 1 --locked |
    grep -o '"name":"[^"]*","version"' | cut -d'"' -f4)
  if [ ${#crates[@]} -eq 0 ]; then
    echo "no workspace members found in \`cargo metadata\`" >&2
    exit 1
  fi
fi

# One throwaway cluster for all test processes, removed at the end. The test
# harness starts it when a test needs it and stops it when the last test
# process exits; the data folder stays between test binaries (one initdb).
export OUTBOX_TEST_PG_DIR="${OUTBOX_TEST_PG_DIR:-$(mktemp -d /tmp/outbox-test-pg.XXXXXX)}"
pg_ctl_bin=$(command -v pg_ctl || ls /usr/lib/postgresql/*/bin/pg_ctl 2>/dev/null | sort -V | tail -n 1 || true)
as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
cluster_running() {
  [ -n "$pg_ctl_bin" ] && [ -f "$OUTBOX_TEST_PG_DIR/data/PG_VERSION" ] &&
    as_postgres "$pg_ctl_bin" status -D "$OUTBOX_TEST_PG_DIR/data" >/dev/null 2>&1
}
case "${OUTBOX_TEST_KEEP_CLUSTER:-}" in "" | 0) keep_cluster="" ;; *) keep_cluster=1 ;; esac
log=$(mktemp /tmp/outbox-test-log.XXXXXX)
cleanup() {
  rm -f "$log"
  if [ -n "$keep_cluster" ]; then
    if cluster_running; then
      echo "kept the test cluster (OUTBOX_TEST_KEEP_CLUSTER): $OUTBOX_TEST_PG_DIR;" \
        "stop it with: pg_ctl stop -D $OUTBOX_TEST_PG_DIR/data" >&2
    fi
    return
  fi
  if cluster_running; then
    as_postgres "$pg_ctl_bin" stop -D "$OUTBOX_TEST_PG_DIR/data" -m immediate -w >/dev/null 2>&1 || true
  fi
  rm -rf "$OUTBOX_TEST_PG_DIR"
}
trap cleanup EXIT
if [ "$(id -u)" -eq 0 ]; then chmod 755 "$OUTBOX_TEST_PG_DIR"; fi

# The targets of `$1` tested again with `--no-default-features`, one
# `cargo test` a line (`--doc` cannot share one); none for a crate whose
# default features are empty.
without_defaults() {
  case "$1" in
    # The layer, `Tx`, the worker, `apply_once` and `webhook` without the
    # admin surface (feature `admin`): unit tests, the integration tests
    # of each, and the doctests (the guide's chapters that need the admin
    # must say so). The PostgreSQL suites that never touch the admin
    # (statement budget, crashes, JetStream, traces, PgBouncer) are not
    # run twice; clippy in `.ci/run` builds every target without it.
    outbox-axum)
      echo "--lib --test layer --test worker --test apply_once --test webhook"
      echo "--doc"
      ;;
  esac
}
# Whether the arguments pick targets themselves (then no second pass).
picks_targets=""
for arg in "${args[@]}"; do
  case "$arg" in
    --) break ;;
    --lib | --doc | --bins | --bin | --bin=* | --tests | --test | --test=* | --examples | \
      --example | --example=* | --benches | --bench | --bench=* | --all-targets)
      picks_targets=1 ;;
  esac
done

failed=()
started=$SECONDS
for crate in "${crates[@]}"; do
  echo "=== cargo test -p $crate --locked ${args[*]}"
  crate_started=$SECONDS
  if ! cargo test -p "$crate" --locked "${args[@]}" 2>&1 | tee -a "$log"; then
    failed+=("$crate")
  fi
  runs=()
  if [ -z "$picks_targets" ]; then mapfile -t runs < <(without_defaults "$crate"); fi
  for run in "${runs[@]}"; do
    read -r -a targets <<<"$run"
    echo "=== cargo test -p $crate --locked --no-default-features ${targets[*]} ${args[*]}"
    if ! cargo test -p "$crate" --locked --no-default-features "${targets[@]}" "${args[@]}" 2>&1 |
      tee -a "$log"; then
      failed+=("$crate (--no-default-features ${targets[*]})")
    fi
  done
  echo "=== $crate: $((SECONDS - crate_started)) s"
done

# The harness stops the cluster after the last test process; one still
# running here was leaked (unless kept on purpose or not ours at all).
if [ -z "${DATABASE_URL:-}" ] && [ -z "$keep_cluster" ] && cluster_running; then
  echo "the test cluster in $OUTBOX_TEST_PG_DIR is still running after the last test process" >&2
  failed+=("(cluster left running)")
fi

echo "=== all crates: $((SECONDS - started)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
fi
# One closing line for the whole run (cargo prints one per test binary).
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
[ ${#failed[@]} -eq 0 ]
