#!/usr/bin/env bash
# Where PostgreSQL's time goes in a burn-down (issue 30): one runner with the
# no-op Lua handler (bench/pg/lua/noop.lua) runs N items down on a cluster of
# its own (scripts/pg.sh) with pg_stat_statements tracking every statement,
# those inside wqrun's functions too. Prints, per job: the transactions
# committed, the WAL bytes, PostgreSQL's CPU (every backend of the cluster,
# from /proc), then the statements the runner sends (top level) and the
# statements inside wqrun's functions, each with its calls, rows and
# execution time per job and its share of the top level's time.
#   bench/pg/statements.sh     N (100000), HISTORY (86400; 0: off), WQRUN,
#                              EXTRA_SQL (run after the load, before the runner: a trial
#                              of an index or a setting), MODE (burndown; enqueue: N items
#                              through wqrun.add_many() in batches of BATCH, 1000)
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${N:-100000}
export HISTORY=${HISTORY:-86400}
. bench/lib/release.sh
if [[ -z ${WQRUN:-} ]]; then
  release_build pg_statements wqrun
  WQRUN=build-bench/wqrun
fi
eval "$(bash scripts/pg.sh start 2>/dev/null)"
runner=
cleanup() {
  [[ -n $runner ]] && kill "$runner" 2>/dev/null
  bash scripts/pg.sh stop "$WQ_PG_DIR" >/dev/null 2>&1 || true
}
trap cleanup EXIT
pgsql() { "$WQ_PG_BIN/psql" -qXAt -v ON_ERROR_STOP=1 "$@"; }
pgsql -c "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'"
bash scripts/pg.sh restart "$WQ_PG_DIR" >/dev/null 2>&1
pgsql -c "ALTER SYSTEM SET pg_stat_statements.track = 'all'" -c "SELECT pg_reload_conf()" >/dev/null
DATABASE_URL=$(bash scripts/pg.sh createdb bench_statements)
export DATABASE_URL
. bench/pg/lib.sh
psql -c "CREATE EXTENSION pg_stat_statements"
mode=${MODE:-burndown}
if [[ $mode == burndown ]]; then
  load_items noop "$n"
else
  "$WQRUN" migrate --db "$DATABASE_URL" >/dev/null
fi
[[ -z ${EXTRA_SQL:-} ]] || psql <<<"$EXTRA_SQL" # a script: each statement on its own (VACUUM too)
pg_cpu() { # CPU seconds of every process of the cluster: the postmaster's own and its exited
  local pm   # children's (psql's backends), and its live children's
  pm=$(head -1 "$WQ_PG_DIR/data/postmaster.pid")
  { awk '{ print $14 + $15 + $16 + $17 }' "/proc/$pm/stat"
    for p in $(pgrep -P "$pm"); do awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || true; done
  } | awk -v hz="$(getconf CLK_TCK)" '{ s += $1 } END { printf "%.3f", s / hz }'
}
psql -c "SELECT pg_stat_statements_reset()" >/dev/null
psql -c "SELECT pg_stat_reset()" >/dev/null
lsn0=$(psql -c "SELECT pg_current_wal_lsn()")
cpu0=$(pg_cpu)
t0=$(now)
if [[ $mode == burndown ]]; then
  "$WQRUN" --quiet --serve --db "$DATABASE_URL" bench/pg/lua/noop.lua &
  runner=$!
  while [[ $(psql -c "SELECT count(*) FROM wqrun.jobs") != 0 ]]; do sleep 0.05; done
  t1=$(now)
  cpu1=$(pg_cpu) # before the runner's stop: its backend is still counted
  kill -TERM "$runner"
  wait "$runner" 2>/dev/null || true
  runner=
else # the enqueue's own clock (the batches are written to a file first)
  out=$(bash bench/pg/wqrun_bench.sh enqueue "$n" "${BATCH:-1000}")
  echo "$out"
  cpu1=$(pg_cpu)
  t1=$(awk -v a="$t0" -v n="$n" '/jobs_per_s/ { printf "%.6f", a + n / $2 }' <<<"$out")
fi
lsn1=$(psql -c "SELECT pg_current_wal_lsn()")
wal=$(psql -c "SELECT pg_wal_lsn_diff('$lsn1', '$lsn0')")
commits=$(psql -c "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
if [[ $mode == burndown ]]; then
  echo "# pg statements: $n no-op jobs, one runner (500 workers), history $HISTORY s"
else
  echo "# pg statements: $n items through wqrun.add_many() in batches of ${BATCH:-1000}"
fi
echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S +0000'), machine: nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v n="$n" -v a="$t0" -v b="$t1" -v c0="$cpu0" -v c1="$cpu1" -v w="$wal" -v x="$commits" 'BEGIN {
  printf "jobs_per_s %.0f\n", n / (b - a)
  printf "pg_cpu_us_per_job %.2f\n", (c1 - c0) * 1e6 / n
  printf "wal_bytes_per_job %.0f\n", w / n
  printf "commits_per_job %.4f (all of the database, psql polls included)\n", x / n
}'
report() { # report TOPLEVEL TITLE
  echo "# $2: calls/job, rows/job, exec us/job, share of the top level's time, statement"
  psql -F $'\t' -c "
    WITH s AS (SELECT toplevel, calls, rows, total_exec_time, query FROM pg_stat_statements
                WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND query NOT LIKE '%pg_stat_statements%'),
         t AS (SELECT sum(total_exec_time) AS top FROM s WHERE toplevel)
    SELECT round(calls::numeric / $n, 4), round(rows::numeric / $n, 4),
           round((total_exec_time * 1000 / $n)::numeric, 2),
           round((100 * total_exec_time / nullif(t.top, 0))::numeric, 1) || '%',
           left(regexp_replace(query, '\\s+', ' ', 'g'), 110)
      FROM s, t WHERE toplevel = $1 ORDER BY total_exec_time DESC LIMIT 15" |
    awk -F'\t' '{ printf "%8s %8s %9s %7s  %s\n", $1, $2, $3, $4, $5 }'
}
report true "sent by the runner (top level)"
report false "inside wqrun's functions (part of the top level's time)"
