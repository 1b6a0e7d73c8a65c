#!/usr/bin/env bash
# Installs the Debian 12 packages wqrun needs, only those that are missing.
# Quiet and quick when everything is there. As root it installs them (running
# apt-get update first); otherwise it prints the command to run and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config
  liblua5.4-dev lua5.4
  libevent-dev
  libsqlite3-dev sqlite3
  libjson-c-dev # payload and HTTP JSON (src/lua/ljson.c)
  libsystemd-dev # sd_notify: Type=notify, the watchdog (src/host/service.c)
  libcurl4-openssl-dev libssl-dev # wq.http (src/host/httpc.c), wq.hmac_sha256 (src/lua/lcrypto.c)
  libcriterion-dev
  lua-cjson lua-cjson-dev # lua-cjson-dev ships the lua5.4-cjson pkg-config file
  python3 # examples/webhook_receiver.py (examples/webhooks.lua), tests/e2e/http_server.py, examples/pool_python.py
  nodejs # examples/pool_node.js, examples/remote_worker.js (tests/e2e/test_pool.sh, test_remote_examples.sh)
  openssl # a self-signed certificate for the test server of tests/e2e/test_wq_http.sh
  nginx # an HTTP/2 server for tests/e2e/test_wq_http2.sh, the server of bench/bench_wqhttp.sh
  curl procps clang-format wrk prometheus # wrk: bench/bench_http.sh; prometheus: promtool for tests/e2e/test_http.sh
  groff-base # nroff renders the man page in tests/e2e/test_install.sh
  tzdata # real time zones for the cron DST tests (tests/engine/test_cron.c)
  chromium chromium-driver python3-selenium # the dashboard in a real browser (tests/e2e/test_dashboard.sh)
  clang libclang-rt-dev # libFuzzer for the fuzz targets (tests/fuzz, scripts/fuzz.sh)
  postgresql postgresql-client libpq-dev # PostgreSQL 15: throwaway clusters (scripts/pg.sh; initdb, pg_ctl, pgbench in /usr/lib/postgresql/15/bin), psql, libpq
)

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "deps.sh: not a Debian system; install the equivalents of: ${packages[*]}" >&2
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
  [[ $status == ii* ]] || missing+=("$p")
done

((${#missing[@]} == 0)) && exit 0

if [[ $(id -u) -ne 0 ]]; then
  echo "deps.sh: missing packages: ${missing[*]}" >&2
  echo "deps.sh: install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

echo "deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deps.sh: done"
