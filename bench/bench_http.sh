#!/usr/bin/env bash
# HTTP API benchmark (issue 5): POST /queues/bench/items throughput with
# keep-alive from wrk (bench/wrk_post.lua: a unique key per request), while the
# same wqrun process runs the items through a no-op handler. Runs three times:
# state in memory, then with --db in a temporary directory (--sync normal,
# then --sync full). Prints one result per
# line as "<name> <value> <unit>"; the bar from the issue is >= 40,000
# enqueues/s. Environment (all optional):
#   WQRUN         wqrun binary (default: build-bench/wqrun, built Release here)
#   WRK_THREADS   wrk threads (2)      WRK_CONNS  connections (32)
#   WRK_DURATION  wrk duration (10s)
set -euo pipefail
cd "$(dirname "$0")/.."

threads=${WRK_THREADS:-2}
conns=${WRK_CONNS:-32}
duration=${WRK_DURATION:-10s}
bar=40000

if ! command -v wrk >/dev/null; then
  echo "SKIP bench_http (wrk not installed; scripts/deps.sh installs it)"
  exit 0
fi
command -v curl >/dev/null || {
  echo "bench_http: curl is not installed" >&2
  exit 1
}

. bench/lib/release.sh
if [[ -z ${WQRUN:-} ]]; then
  release_build bench_http wqrun
  WQRUN=build-bench/wqrun
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/wq-bench-http.XXXXXX")
pid=
cleanup() {
  [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

cat >"$tmp/bench.lua" <<'EOF'
-- One queue whose handler does nothing: every posted item is really run.
wq.queue("bench", {handler = function() end})
EOF

# start [wqrun options...]: random free port, waits for /healthz. Sets pid, base.
start() {
  local i
  for _ in 1 2 3 4 5 6 7 8; do
    local port=$((20000 + (RANDOM * 32768 + RANDOM) % 40001))
    base=http://127.0.0.1:$port
    "$WQRUN" --quiet --listen "127.0.0.1:$port" "$@" "$tmp/bench.lua" 2>"$tmp/err" &
    pid=$!
    for ((i = 0; i < 100; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      [[ $(curl -s -m 1 "$base/healthz" 2>/dev/null) == ok* ]] && return 0
      sleep 0.05
    done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=
    grep -q "cannot listen" "$tmp/err" || break
  done
  echo "bench_http: wqrun did not start: $(head -c 500 "$tmp/err")" >&2
  exit 1
}

stat_of() { curl -s -m 10 "$base/queues" | grep -o "\"$1\":[0-9]*" | head -n 1 | cut -d: -f2; }

# run NAME [wqrun options...]
run() {
  local name=$1
  shift
  start "$@"
  wrk -t"$threads" -c"$conns" -d"$duration" --latency -s bench/wrk_post.lua \
    "$base/queues/bench/items" >"$tmp/wrk.out" 2>&1 || {
    cat "$tmp/wrk.out" >&2
    echo "bench_http: wrk failed" >&2
    exit 1
  }
  local t0 i
  t0=$(date +%s.%N)
  # Wait until the handler has run every item.
  for ((i = 0; i < 1200; i++)); do
    [[ $(stat_of queued) == 0 && $(stat_of processing) == 0 && $(stat_of waiting) == 0 ]] && break
    sleep 0.05
  done
  local drain
  drain=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.2f", a - b }')
  v() { awk -v k="$1" '$1 == k { print $2 }' "$tmp/wrk.out"; }
  local rps p99 reqs adds ndone non2xx sockerr
  rps=$(v wrk_rps)
  p99=$(awk -v u="$(v wrk_p99_us)" 'BEGIN { printf "%.2f", u / 1000 }')
  reqs=$(v wrk_requests)
  non2xx=$(v wrk_non2xx)
  sockerr=$(v wrk_socket_errors)
  adds=$(stat_of adds)
  ndone=$(stat_of "done")
  echo "${name}_rps $rps req/s"
  echo "${name}_p50 $(awk -v u="$(v wrk_p50_us)" 'BEGIN { printf "%.2f", u / 1000 }') ms"
  echo "${name}_p99 $p99 ms"
  echo "${name}_p999 $(awk -v u="$(v wrk_p999_us)" 'BEGIN { printf "%.2f", u / 1000 }') ms"
  echo "${name}_requests $reqs requests"
  echo "${name}_non2xx $non2xx responses"
  echo "${name}_socket_errors $sockerr errors"
  echo "${name}_adds $adds items"
  echo "${name}_done $ndone items"
  echo "${name}_drain_after_wrk $drain s"
  if [[ -n ${DB:-} ]]; then
    local m
    m=$(curl -s -m 10 "$base/metrics")
    echo "${name}_store_commits $(awk '$1 == "wqrun_store_commits_total" { print $2 }' <<<"$m") commits"
    echo "${name}_store_rows_written $(awk '$1 == "wqrun_store_rows_written_total" { print $2 }' <<<"$m") rows"
  fi
  kill -TERM "$pid"
  local rc=0
  wait "$pid" || rc=$?
  pid=
  ((rc == 0)) || echo "# ${name}: wqrun exited with status $rc after SIGTERM" >&2
  if [[ -n ${DB:-} ]] && command -v sqlite3 >/dev/null; then
    echo "${name}_items_left_in_db $(sqlite3 "$DB" 'select count(*) from items') rows"
  fi
  local verdict=met
  awk -v r="$rps" -v b="$bar" 'BEGIN { exit !(r >= b) }' || verdict=MISSED
  ((non2xx == 0 && ndone >= reqs)) || verdict="$verdict (but non2xx=$non2xx, done=$ndone < requests=$reqs)"
  echo "# ${name}: bar $bar req/s $verdict"
}

echo "# bench_http (wqrun HTTP API, POST /queues/bench/items, no-op handler)"
echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S +0000')"
echo "# machine: nproc $(nproc), cpu $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
echo "# wrk -t$threads -c$conns -d$duration --latency -s bench/wrk_post.lua; binary $WQRUN"
DB='' run http_post
DB=$tmp/state.db run http_post_db --db "$tmp/state.db"
DB=$tmp/full.db run http_post_db_full --db "$tmp/full.db" --sync full
