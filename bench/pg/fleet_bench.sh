#!/usr/bin/env bash
# The fleet measures of bench/pg (issue 17): several runners on one database.
# Each mode prints `<name> <value> <unit>` lines and `#` notes on the database
# of DATABASE_URL (fresh, from run.sh's `measure`); WQRUN names the binary.
#
#   fleet_bench.sh scaleout N RUNNERS      N jobs that wait 50 ms, RUNNERS x 50 workers
#   fleet_bench.sh grouped N RUNNERS G L   N no-op jobs over G groups; L=1: concurrency 1
#                                          per group (group_limit), L=0: no limit
#   fleet_bench.sh delays N RUNNERS        each runner adds N items with add_after 1-5 s;
#                                          lateness (start - due) over all of them
#   fleet_bench.sh saturated ITEMS GROUPS  the claim of the one eligible item among ITEMS
#                                          queued in GROUPS groups, all but one saturated,
#                                          against the same claim with one group
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${WQRUN:?WQRUN must name the wqrun binary}" "${DATABASE_URL:?}"
# shellcheck source=lib.sh
. "$here/lib.sh"

# load QUEUE N [GROUPS]: lib.sh's load_items, then ANALYZE
load() {
  load_items "$@"
  psql -c "analyze wqrun.jobs"
}

# drain SCRIPT RUNNERS ENV...: runs RUNNERS one-shot runners of SCRIPT until the queue is
# empty; prints the wall seconds.
drain() {
  local script=$1 runners=$2 t0 t1 i
  shift 2
  t0=$(now)
  for ((i = 0; i < runners; i++)); do
    env "$@" "$WQRUN" --quiet --db "$DATABASE_URL" "$script" &
  done
  wait
  t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
}

scaleout() {
  local n=$1 runners=$2 s
  load scale "$n"
  s=$(drain "$here/lua/scale.lua" "$runners" WORKERS=50)
  [ "$(psql -c "select count(*) from wqrun.jobs")" = 0 ] || { echo "scaleout: jobs left" >&2; exit 1; }
  echo "# $n jobs that wait 50 ms (wq.sleep), $runners runner(s) x 50 workers, until the queue is empty (ideal: $((runners * 1000)) jobs/s)"
  awk -v n="$n" -v r="$runners" -v s="$s" 'BEGIN { printf "fleet_scaleout_r%d_jobs_per_s %.0f jobs/s\n", r, n / s }'
}

grouped() {
  local n=$1 runners=$2 groups=$3 limited=$4 s
  # The queue is defined (its group limit stored) before the items come, as with runners in
  # service: an add then holds an item of a saturated group at once. PREDEFINE=0: loaded
  # first, so that the claims hold them (the first figure of issue 17's measure).
  if [ "${PREDEFINE:-1}" = 1 ]; then
    "$WQRUN" migrate --db "$DATABASE_URL" >/dev/null
    env WORKERS=1 GROUPED="$limited" "$WQRUN" --quiet --db "$DATABASE_URL" "$here/lua/grouped.lua"
  fi
  load grouped "$n" "$groups"
  s=$(drain "$here/lua/grouped.lua" "$runners" WORKERS=500 GROUPED="$limited")
  [ "$(psql -c "select count(*) from wqrun.jobs")" = 0 ] || { echo "grouped: jobs left" >&2; exit 1; }
  echo "# $n no-op jobs over $groups groups, $runners runner(s) x 500 workers, $([ "$limited" = 1 ] && echo "concurrency 1 per group" || echo "no group limit")"
  awk -v n="$n" -v r="$runners" -v s="$s" -v l="$limited" 'BEGIN {
    printf "fleet_grouped_%s_r%d_jobs_per_s %.0f jobs/s\n", (l == 1 ? "limited" : "free"), r, n / s }'
}

delays() {
  local n=$1 runners=$2 i tmp
  "$WQRUN" migrate --db "$DATABASE_URL" >/dev/null
  tmp=$(mktemp -d)
  local pids=()
  for ((i = 0; i < runners; i++)); do
    RUNNER=r$i N=$n "$WQRUN" --quiet --serve --db "$DATABASE_URL" "$here/lua/delays.lua" >"$tmp/late.$i" &
    pids+=($!)
  done
  local total=$((n * runners)) got=0
  for i in $(seq 200); do
    got=$(cat "$tmp"/late.* | wc -l)
    [ "$got" -ge "$total" ] && break
    sleep 0.1
  done
  kill "${pids[@]}"
  wait 2>/dev/null || true
  [ "$got" -ge "$total" ] || { echo "delays: $got of $total ran" >&2; exit 1; }
  echo "# $runners runners each add $n items with add_after 1-5 s; lateness = start - due (ms), all $total items"
  sort -n "$tmp"/late.* | awk -v r="$runners" '{ v[NR] = $1 } END {
    printf "fleet_delays_r%d_lateness_p50_ms %.2f ms\n", r, v[int(NR * 0.5) + 1]
    printf "fleet_delays_r%d_lateness_p99_ms %.2f ms\n", r, v[int(NR * 0.99) + 1]
    printf "fleet_delays_r%d_lateness_max_ms %.2f ms\n", r, v[NR]
    printf "fleet_delays_r%d_early_items %d items\n", r, early }' early="$(cat "$tmp"/late.* | awk '$1 < 0 { n++ } END { print n + 0 }')"
  rm -rf "$tmp"
}

# The claim cost with saturated groups: ITEMS items in GROUPS groups, every group but one
# saturated (its items held, as claims leave them), timed against one group of ITEMS items.
saturated() {
  local items=$1 groups=$2
  "$WQRUN" migrate --db "$DATABASE_URL" >/dev/null
  psql <<SQL >/dev/null
insert into wqrun.queues (name, g_conc) values ('sat', 1), ('one', 1);
insert into wqrun.runners (name, host, pid, lease) values ('bench', 'bench', 0, 3600);
-- ITEMS items of queue sat in GROUPS groups: every group but g0 has one running and the rest
-- held (what claims leave); g0 has one queued item, the last in FIFO order.
insert into wqrun.jobs (queue, key, grp, run_at, seq, running, held, runner)
  select 'sat', 'k' || i, 'g' || (1 + i % ($groups - 1)), now() - interval '1 hour', i,
         i <= $groups - 1, i > $groups - 1, case when i <= $groups - 1 then 1 end
    from generate_series(1, $items - 1) i;
insert into wqrun.jobs (queue, key, grp, run_at, seq) values ('sat', 'eligible', 'g0', now(), $items + 1);
insert into wqrun.groups (queue, grp, running) select 'sat', 'g' || g, 1 from generate_series(1, $groups - 1) g;
-- the same claim with one group and one queued item
insert into wqrun.jobs (queue, key, grp, run_at, seq) values ('one', 'eligible', 'g0', now(), 1);
analyze wqrun.jobs;
SQL
  local rid
  rid=$(psql -c "select id from wqrun.runners where name = 'bench'")
  # median of 21 claims of the eligible item in one session (the first, which compiles the
  # function, is not counted), handed back after each
  local t
  for q in sat one; do
    t=$(for i in $(seq 22); do
      echo "select count(*) from wqrun.claim('$q', 1, $rid);"
      echo "update wqrun.jobs set running = false, runner = null, token = null where queue = '$q' and key = 'eligible';"
      echo "update wqrun.groups set running = 0 where queue = '$q' and grp = 'g0';"
    done | psql -c "\\timing on" -f - | awk '/^Time:/ { n++; if (n % 3 == 1 && n > 1) print $2 }' |
      sort -n | awk '{ v[NR] = $1 } END { print v[int(NR / 2) + 1] }')
    echo "fleet_saturated_claim_$q $t ms"
  done | awk -v i="$items" -v g="$groups" 'BEGIN { print "# the claim of the one eligible item (wqrun.claim, median of 21): among " i " items in " g " groups, all but one saturated (sat), and alone in one group (one)" } { print }'
}

mode=${1:?mode}
shift
"$mode" "$@"
