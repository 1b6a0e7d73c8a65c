#!/usr/bin/env bash
# The wqrun side of bench/pg: each mode prints `<name> <value> <unit>` lines
# and `#` notes, on the database of DATABASE_URL (fresh, from run.sh's
# `measure`). WQRUN names the binary (build/wqrun).
#
#   wqrun_bench.sh burndown N RUNNERS [WORKERS]   N pre-added no-op jobs (ANALYZE after the load)
#   wqrun_bench.sh burndown_flaky N RUNNERS        the same, every 50th key failing once (lua/flaky.lua)
#   wqrun_bench.sh enqueue_grouped N BATCH GROUPS  wqrun.add_many() of items in GROUPS groups
#   wqrun_bench.sh enqueue N BATCH                 wqrun.add_many() in batches of BATCH
#   wqrun_bench.sh enqueue_http N BATCH            POST /queues/noop/items:batch to one runner
#   wqrun_bench.sh latency N                       add->start, one add at a time (wqrun_latency.mjs)
#   wqrun_bench.sh takeover                        kill -9 a runner holding 50 running items
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${WQRUN:?WQRUN must name the wqrun binary}" "${DATABASE_URL:?}"
# shellcheck source=lib.sh
. "$here/lib.sh"

# CPU seconds (user+system) the cluster's server processes used so far: the
# postmaster's own and its reaped children's (backends that exited), plus
# the live children's.
pg_cpu() {
  local pm
  pm=$(head -1 "$WQ_PG_DIR/data/postmaster.pid")
  {
    awk '{ print $14 + $15 + $16 + $17 }' /proc/"$pm"/stat
    for p in $(pgrep -P "$pm"); do awk '{ print $14 + $15 }' /proc/"$p"/stat 2>/dev/null || true; done
  } | awk -v hz="$(getconf CLK_TCK)" '{ t += $1 } END { printf "%.3f\n", t / hz }'
}

load() { load_items noop "$1"; } # N jobs into queue noop

burndown_flaky() { LUA=flaky BURN=burndown_flaky burndown "$1" "$2" 500; }

burndown() {
  local n=$1 runners=$2 workers=${3:-500} t0 t1 c0 c1 i lua=${LUA:-noop} name=${BURN:-burndown}
  load "$n"
  psql -c "analyze wqrun.jobs"
  local tmp
  tmp=$(mktemp -d)
  c0=$(pg_cpu)
  t0=$(now)
  for ((i = 0; i < runners; i++)); do
    WORKERS=$workers /usr/bin/time -f "%U %S" -o "$tmp/time.$i" \
      "$WQRUN" --quiet --db "$DATABASE_URL" "$here/lua/$lua.lua" &
  done
  wait
  t1=$(now)
  sleep 0.5 # the postmaster reaps the runners' backends (their CPU joins its children's)
  c1=$(pg_cpu)
  local left
  left=$(psql -c "select count(*) from wqrun.jobs")
  [ "$left" = 0 ] || { echo "burndown: $left jobs left" >&2; exit 1; }
  local cpu
  cpu=$(cat "$tmp"/time.* | awk '{ t += $1 + $2 } END { print t }')
  rm -rf "$tmp"
  echo "# $n no-op jobs pre-added (add_many), ANALYZE, then $runners runner(s) x $workers workers until the queue is empty (wall time includes start-up)"
  awk -v n="$n" -v r="$runners" -v a="$t0" -v b="$t1" -v c="$cpu" -v p0="$c0" -v p1="$c1" -v m="$name" 'BEGIN {
    printf "wqrun_%s_r%d_jobs_per_s %.0f jobs/s\n", m, r, n / (b - a)
    printf "wqrun_%s_r%d_cpu_us_per_job %.2f us/job\n", m, r, c * 1e6 / n
    printf "wqrun_%s_r%d_pg_cpu_us_per_job %.2f us/job\n", m, r, (p1 - p0) * 1e6 / n }'
}

# enqueue N BATCH [GROUPS]: N items, in GROUPS groups when given (enqueue_grouped).
enqueue() {
  local n=$1 b=$2 g=${3:-0} t0 t1 i name=enqueue what=""
  if ((g > 0)); then
    name=enqueue_grouped what=" in $g groups"
  fi
  "$WQRUN" migrate --db "$DATABASE_URL" >/dev/null
  # The batches as files first, so the clock counts only the database's work: each a JSON
  # text as a producer sends it (graphile.mjs's addJobs sends its specs as JSON too).
  local tmp
  tmp=$(mktemp -d)
  for ((i = 0; i < n; i += b)); do
    awk -v a="$i" -v b="$b" -v n="$n" -v g="$g" 'BEGIN {
      printf "select count(*) from jsonb_array_elements(wqrun.add_many(\x27[";
      for (k = a + 1; k <= a + b && k <= n; k++) {
        printf "%s{\"queue\":\"noop\",\"key\":\"k%d\",\"payload\":{\"n\":%d}", (k > a + 1 ? "," : ""), k, k
        if (g > 0) printf ",\"group\":\"g%d\"", k % g
        printf "}"
      }
      print "]\x27::jsonb)) e;" }'
  done >"$tmp/load.sql"
  t0=$(now)
  psql -f "$tmp/load.sql" >/dev/null
  t1=$(now)
  rm -rf "$tmp"
  echo "# $n jobs$what through wqrun.add_many() in batches of $b, one transaction each"
  awk -v n="$n" -v b="$b" -v a="$t0" -v c="$t1" -v m="$name" 'BEGIN { printf "wqrun_%s_b%d_jobs_per_s %.0f jobs/s\n", m, b, n / (c - a) }'
}

enqueue_grouped() { enqueue "$1" "$2" "$3"; }

enqueue_http() {
  local n=$1 b=$2 port=$((20000 + RANDOM % 20000)) t0 t1 i
  "$WQRUN" migrate --db "$DATABASE_URL" >/dev/null
  local tmp
  tmp=$(mktemp -d)
  echo 'wq.queue("noop")' >"$tmp/serve.lua"
  for ((i = 0; i < n; i += b)); do
    awk -v a="$i" -v b="$b" -v n="$n" 'BEGIN { printf "["; for (k = a + 1; k <= a + b && k <= n; k++)
      printf "%s{\"key\":\"k%d\",\"payload\":{\"n\":%d}}", (k > a + 1 ? "," : ""), k, k; print "]" }' >"$tmp/b.$i.json"
  done
  "$WQRUN" --quiet --serve --listen "127.0.0.1:$port" --db "$DATABASE_URL" "$tmp/serve.lua" &
  local pid=$!
  for i in $(seq 50); do curl -sf "127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
  # One keep-alive connection, one request at a time (as graphile.mjs awaits each addJobs):
  # a curl per request measured curl's start-up (about a third of the time).
  t0=$(now)
  python3 - "$port" "$tmp"/b.*.json <<'PY'
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=60)
for f in sys.argv[2:]:
    c.request("POST", "/queues/noop/items:batch", open(f, "rb").read(), {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    if r.status != 202:
        sys.exit("items:batch answered %d" % r.status)
PY
  t1=$(now)
  kill "$pid"
  wait "$pid" || true
  local got
  got=$(psql -c "select count(*) from wqrun.jobs")
  rm -rf "$tmp"
  [ "$got" = "$n" ] || { echo "enqueue_http: $got of $n stored" >&2; exit 1; }
  echo "# $n jobs through POST /queues/noop/items:batch ($b per request, one at a time on one connection; 202 = committed)"
  awk -v n="$n" -v b="$b" -v a="$t0" -v c="$t1" 'BEGIN { printf "wqrun_enqueue_http_b%d_jobs_per_s %.0f jobs/s\n", b, n / (c - a) }'
}

takeover() {
  "$WQRUN" migrate --db "$DATABASE_URL" >/dev/null
  local tmp
  tmp=$(mktemp -d)
  RUNNER=a "$WQRUN" --quiet --serve --db "$DATABASE_URL" "$here/lua/sleeper.lua" >"$tmp/a.log" &
  local a=$!
  psql -c "select wqrun.add_many((select jsonb_agg(jsonb_build_object('queue', 'slow', 'key', 'k' || g)) from generate_series(1, 50) g))" >/dev/null
  local i
  for i in $(seq 100); do [ "$(wc -l <"$tmp/a.log")" -ge 50 ] && break; sleep 0.1; done
  RUNNER=b "$WQRUN" --quiet --serve --db "$DATABASE_URL" "$here/lua/sleeper.lua" >"$tmp/b.log" &
  local b=$!
  sleep 1
  local tk
  tk=$(now)
  kill -9 "$a"
  for i in $(seq 100); do [ "$(wc -l <"$tmp/b.log")" -ge 50 ] && break; sleep 0.1; done
  kill -9 "$b"
  wait 2>/dev/null || true
  echo "# a runner holding 50 running items (handler sleeps 30 s) is killed with kill -9; an idle runner was running beside it"
  awk -v k="$tk" '{ d = $3 - k; if (d > m) m = d; n++ } END {
    printf "wqrun_takeover_items %d items\n", n
    printf "wqrun_takeover_last_start_s %.3f s\n", m }' "$tmp/b.log"
  rm -rf "$tmp"
}

latency() { WQRUN=$WQRUN node "$here/wqrun_latency.mjs" "$1"; }

mode=${1:?mode}
shift
"$mode" "$@"
