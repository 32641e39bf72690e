#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs what is missing
# (PostgreSQL server binaries), then runs every test of the workspace against
# real PostgreSQL (a throwaway cluster, unless DATABASE_URL is set) and SQLite.
set -euo pipefail
cd "$(dirname "$0")/.."

have_postgres() {
  command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}

if [ -z "${DATABASE_URL:-}" ] && ! have_postgres; then
  echo "PostgreSQL server binaries not found: installing them" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends postgresql
fi

# One throwaway cluster for all test processes, removed at the end.
export OUTBOX_TEST_PG_DIR="${OUTBOX_TEST_PG_DIR:-$(mktemp -d /tmp/outbox-test-pg.XXXXXX)}"
cleanup() {
  if [ -f "$OUTBOX_TEST_PG_DIR/data/PG_VERSION" ]; then
    pg_ctl_bin=$(command -v pg_ctl || ls /usr/lib/postgresql/*/bin/pg_ctl | sort -V | tail -n 1)
    if [ "$(id -u)" -eq 0 ]; then
      runuser -u postgres -- "$pg_ctl_bin" stop -D "$OUTBOX_TEST_PG_DIR/data" -m immediate -w >/dev/null 2>&1 || true
    else
      "$pg_ctl_bin" stop -D "$OUTBOX_TEST_PG_DIR/data" -m immediate -w >/dev/null 2>&1 || true
    fi
  fi
  rm -rf "$OUTBOX_TEST_PG_DIR"
}
trap cleanup EXIT
if [ "$(id -u)" -eq 0 ]; then chmod 755 "$OUTBOX_TEST_PG_DIR"; fi

log=$(mktemp /tmp/outbox-test-log.XXXXXX)
cargo test --workspace --locked "$@" 2>&1 | tee "$log"
# One closing line for the whole run (cargo prints one per test binary).
awk '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
rm -f "$log"
