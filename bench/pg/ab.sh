#!/usr/bin/env bash
# Two builds of wqrun side by side on one throwaway PostgreSQL 15 cluster
# (scripts/pg.sh), measure by measure, the builds' order alternating from
# round to round; medians and the new/base ratio at the end. For a change to
# the runner's SQL: "nothing slower" in the same run.
#
#   WQRUN=build/wqrun bench/pg/ab.sh --base OTHER_WQRUN [--rounds R] [--jobs N]
#
#   burn1     N no-op jobs pre-added, 1 runner x 500 workers (wqrun_bench.sh burndown)
#   burn2     the same, 2 runners
#   flaky1    N jobs, every 50th failing once (most outcome batches hold a retry), 1 runner
#   enq       N jobs through wqrun.add_many in batches of 1,000
#   enq_grp   N jobs in 50 groups through wqrun.add_many in batches of 1,000
# Defaults: 3 rounds, N = 100,000. Output: `<name> <value> <unit>` lines and
# `#` notes, also in bench/pg/ab-last-run.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
: "${WQRUN:?WQRUN must name the new wqrun binary}"
new=$(abs "$WQRUN")
base="" rounds=3 jobs=100000
while [ $# -gt 0 ]; do
  case $1 in
  --base) base=$(abs "$2"); shift 2 ;;
  --rounds) rounds=$2; shift 2 ;;
  --jobs) jobs=$2; shift 2 ;;
  -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
  *) echo "ab.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$base" ] || { echo "ab.sh: --base OTHER_WQRUN is required" >&2; exit 2; }
pgsh=$root/scripts/pg.sh
# shellcheck source=lib.sh
. "$here/lib.sh"
start_rotation "$here/ab-last-run.txt"
say "# bench/pg/ab.sh: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $rounds round(s), $jobs jobs"
say_machine
say "# new: $new ($("$new" --version 2>&1 | head -1)); base: $base"
say "# $("$pgbin/postgres" --version), cluster from scripts/pg.sh"
measures=("burn1 burndown $jobs 1" "burn2 burndown $jobs 2" "flaky1 burndown_flaky $jobs 1"
  "enq enqueue $jobs 1000" "enq_grp enqueue_grouped $jobs 1000 50")
for ((r = 1; r <= rounds; r++)); do
  say "# ==== round $r of $rounds"
  for m in "${measures[@]}"; do
    set -- $m
    name=$1
    shift
    if ((r % 2)); then order="new base"; else order="base new"; fi
    for v in $order; do
      bin=$new
      [ "$v" = base ] && bin=$base
      # each line of the measure gets the variant's name in front
      WQRUN=$bin measure_on "ab_${name}_$v" bash -c '"$0" "$@" | sed "s/^\([a-z]\)/'"$v"' \1/"' \
        "$here/wqrun_bench.sh" "$@"
    done
  done
done
say "# ==== medians (lowest-highest), new/base"
awk '$1 == "new" || $1 == "base" { v[$2 " " $1] = v[$2 " " $1] " " $3; u[$2] = $4 }
  END {
    for (k in v) { split(k, p, " "); names[p[1]] = 1 }
    for (n in names) {
      for (w = 0; w < 2; w++) {
        b = w ? "base" : "new"; c = split(substr(v[n " " b], 2), a, " ")
        for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        med[b] = c % 2 ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2; lo[b] = a[1]; hi[b] = a[c]
      }
      printf "%s new %s (%s-%s) base %s (%s-%s) %s ratio %.2f\n", n, med["new"], lo["new"], hi["new"],
        med["base"], lo["base"], hi["base"], u[n], med["base"] ? med["new"] / med["base"] : 0
    }
  }' "$log" | sort | tee -a "$log"
