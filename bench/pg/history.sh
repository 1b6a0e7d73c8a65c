#!/usr/bin/env bash
# The cost of the history (SPEC 11) on PostgreSQL: the same wqrun binary, the queue's history
# option on (the default, a day) and off (HISTORY=0), side by side on one throwaway PostgreSQL
# 15 cluster (scripts/pg.sh), the order alternating from round to round; medians, ranges and
# the per-round on/off ratios at the end. Issue 28's bar: on >= 0.90 x off.
#
#   WQRUN=build/wqrun bench/pg/history.sh [--rounds R] [--jobs N]
#
#   burn1   N no-op jobs pre-added, 1 runner x 500 workers (wqrun_bench.sh burndown)
#   burn2   the same, 2 runners
# Defaults: 5 rounds, N = 100,000. Output: `<name> <value> <unit>` lines and `#` notes, also
# in bench/pg/history-last-run.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
: "${WQRUN:?WQRUN must name the wqrun binary}"
case $WQRUN in /*) ;; *) WQRUN=$PWD/$WQRUN ;; esac
export WQRUN
rounds=5 jobs=100000
while [ $# -gt 0 ]; do
  case $1 in
  --rounds) rounds=$2; shift 2 ;;
  --jobs) jobs=$2; shift 2 ;;
  -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
  *) echo "history.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
pgsh=$root/scripts/pg.sh
# shellcheck source=lib.sh
. "$here/lib.sh"
start_rotation "$here/history-last-run.txt"
say "# bench/pg/history.sh: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $rounds round(s), $jobs jobs"
say_machine
say "# wqrun: $WQRUN ($("$WQRUN" --version 2>&1 | head -1)), commit $(git -C "$root" rev-parse --short HEAD)"
say "# $("$pgbin/postgres" --version), cluster from scripts/pg.sh"
measures=("burn1 burndown $jobs 1" "burn2 burndown $jobs 2")
for ((r = 1; r <= rounds; r++)); do
  say "# ==== round $r of $rounds"
  for m in "${measures[@]}"; do
    set -- $m
    name=$1
    shift
    if ((r % 2)); then order="on off"; else order="off on"; fi
    for v in $order; do
      h=86400
      [ "$v" = off ] && h=0
      # each line of the measure gets the variant's name and the round in front
      HISTORY=$h measure_on "hist_${name}_$v" bash -c '"$0" "$@" | sed "s/^\([a-z]\)/'"$v $r"' \1/"' \
        "$here/wqrun_bench.sh" "$@"
    done
  done
done
say "# ==== medians (lowest-highest), on/off of the medians, per-round on/off range"
awk '($1 == "on" || $1 == "off") && $3 ~ /jobs_per_s$/ { v[$3 " " $1] = v[$3 " " $1] " " $4; x[$3 " " $2 " " $1] = $4; n[$3] = 1; rr[$2] = 1 }
  END {
    for (m in n) {
      for (w = 0; w < 2; w++) {
        b = w ? "off" : "on"; c = split(substr(v[m " " b], 2), a, " ")
        for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        med[b] = c % 2 ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2; lo[b] = a[1]; hi[b] = a[c]
      }
      rl = 99; rh = 0; rs = ""
      for (r in rr) if (x[m " " r " off"] > 0) {
        q = x[m " " r " on"] / x[m " " r " off"]; rs = rs sprintf(" r%s:%.2f", r, q)
        if (q < rl) rl = q; if (q > rh) rh = q
      }
      printf "%s on %s (%s-%s) off %s (%s-%s) jobs/s ratio %.2f, per round %.2f-%.2f:%s\n", m, med["on"], lo["on"], hi["on"],
        med["off"], lo["off"], hi["off"], med["on"] / med["off"], rl, rh, rs
    }
  }' "$log" | sort | tee -a "$log"
