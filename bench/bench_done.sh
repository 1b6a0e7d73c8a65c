#!/usr/bin/env bash
# Completed-job memory benchmarks (issue 10), through the Release wqrun:
#   1. throughput: bench/persist.lua N run (N no-op jobs, 1 worker) with
#      --db --sync normal, keep_done off and keep_done = 3600 alternately,
#      ROUNDS rounds; the medians and their ratio (bar: keep_done keeps
#      >= 80% of the jobs/s without it), by the wall clock and by the loop
#      thread's CPU time (N / CPU seconds: what the loop would do alone,
#      which a busy shared machine hides from the wall clock);
#   2. prune pauses: bench/prune_pause.lua, a 1 ms wq.every recording the
#      gaps between its ticks for SECONDS after N jobs, while their
#      memories expire (keep_done = 2) and are pruned, in memory and with
#      --db; next to the same run with nothing expiring (keep_done = 1e6),
#      to show what the machine itself does (bar: no gap over 10 ms while
#      pruning). With --db it also counts the done rows left in the file.
# With WQRUN_BEFORE set, every run is repeated with that binary in the same
# round (before/after, interleaved). Prints `<name> <value> <unit>` lines
# (medians; every run on a "#" line) and the verdicts. Environment:
#   WQRUN          wqrun binary (default: build-bench/wqrun, built Release here)
#   WQRUN_BEFORE   a second binary to compare with (optional)
#   DONE_JOBS      jobs (1000000)   DONE_ROUNDS  rounds (3)   PRUNE_SECONDS  (20)
#   DONE_ONLY      "throughput" or "prune": only that part
#   PRUNE_RT=1     run prune_pause.lua with real-time priority (chrt -f 5, as root): on a
#                  shared machine other processes otherwise show up as gaps of 10-20 ms
#                  (a bare C loop of 1 ms sleeps sees them too); this leaves the loop's own
#                  pauses
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

jobs=${DONE_JOBS:-1000000}
rounds=${DONE_ROUNDS:-3}
seconds=${PRUNE_SECONDS:-20}
only=${DONE_ONLY:-}

. bench/lib/release.sh
if [[ -z ${WQRUN:-} ]]; then
  release_build bench_done wqrun
  WQRUN=build-bench/wqrun
fi
bins=(after)
declare -A bin=([after]=$WQRUN)
if [[ -n ${WQRUN_BEFORE:-} ]]; then
  bins=(before after)
  bin[before]=$WQRUN_BEFORE
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/wq-bench-done.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
db=$tmp/state.db

value() { awk -v k="$1" '$1 == k { print $2 }' "$2"; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
calc() { awk "BEGIN { printf \"%.${2:-0}f\", $1 }"; }

echo "# bench_done (keep_done: throughput with --db, prune pauses)"
echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S +0000')"
echo "# machine: nproc $(nproc), cpu $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# binaries: ${bins[*]/#/ }: $(for b in "${bins[@]}"; do printf '%s=%s ' "$b" "${bin[$b]}"; done)"
echo "# $rounds rounds, runs interleaved; medians reported"
[[ ${PRUNE_RT:-} == 1 && $only != throughput ]] && echo "# prune runs with real-time priority (chrt -f 5)"

declare -A runs

# run_jobs LABEL BIN KEEP: one persist.lua run with --db; appends its end-to-end jobs/s.
run_jobs() {
  rm -f "$db" "$db-wal" "$db-shm"
  KEEP_DONE=$3 "$2" --quiet --db "$db" --sync normal bench/persist.lua "$jobs" run p \
    >"$tmp/out" 2>"$tmp/err" || {
    echo "bench_done: $2 persist.lua failed: $(head -c 2000 "$tmp/err")" >&2
    exit 1
  }
  runs[$1]+="$(calc "$(value p_end_to_end "$tmp/out")") "
  runs[$1.cpu]+="$(calc "$jobs / $(value p_loop_cpu "$tmp/out")") "
}

# run_prune LABEL BIN KEEP [--db]: one prune_pause.lua run; appends its gap figures.
run_prune() {
  local label=$1 b=$2 keep=$3 db_args=() rt=()
  rm -f "$db" "$db-wal" "$db-shm"
  [[ ${4:-} == --db ]] && db_args=(--db "$db" --sync normal)
  [[ ${PRUNE_RT:-} == 1 ]] && rt=(chrt -f 5)
  "${rt[@]}" "$b" --quiet "${db_args[@]}" bench/prune_pause.lua "$jobs" "$keep" "$seconds" p \
    >"$tmp/out" 2>"$tmp/err" || {
    echo "bench_done: $b prune_pause.lua failed: $(head -c 2000 "$tmp/err")" >&2
    exit 1
  }
  runs[$label.max]+="$(value p_gap_max "$tmp/out") "
  runs[$label.p999]+="$(value p_gap_p999 "$tmp/out") "
  runs[$label.over10]+="$(value p_gaps_over_10ms "$tmp/out") "
  runs[$label.over8]+="$(value p_gaps_over_8ms "$tmp/out") "
  if [[ ${4:-} == --db ]] && command -v sqlite3 >/dev/null; then
    runs[$label.left]+="$(sqlite3 "$db" 'SELECT count(*) FROM done') "
  fi
}

if [[ $only != prune ]]; then
  for ((r = 1; r <= rounds; r++)); do
    for b in "${bins[@]}"; do
      run_jobs "$b.off" "${bin[$b]}" ""
      run_jobs "$b.keep" "${bin[$b]}" 3600
    done
  done
  for b in "${bins[@]}"; do
    off=$(median ${runs[$b.off]})
    keep=$(median ${runs[$b.keep]})
    echo "#   $b: keep_done off runs ${runs[$b.off]}jobs/s; keep_done = 3600 runs ${runs[$b.keep]}jobs/s"
    echo "done_${b}_db_keep_off $off jobs/s"
    echo "done_${b}_db_keep_3600 $keep jobs/s"
    ratio=$(calc "$keep / $off" 3)
    echo "done_${b}_db_keep_ratio $ratio x"
    v=MISSED
    awk -v r="$ratio" 'BEGIN { exit !(r >= 0.8) }' && v=met
    echo "# done_${b}: keep_done = 3600 keeps $ratio of the jobs/s without it (medians), bar >= 0.8: $v"
    echo "#   $b by loop CPU: keep_done off ${runs[$b.off.cpu]}jobs/s; keep_done = 3600 ${runs[$b.keep.cpu]}jobs/s"
    offc=$(median ${runs[$b.off.cpu]})
    keepc=$(median ${runs[$b.keep.cpu]})
    echo "done_${b}_db_keep_off_by_cpu $offc jobs/s"
    echo "done_${b}_db_keep_3600_by_cpu $keepc jobs/s"
    echo "done_${b}_db_keep_ratio_by_cpu $(calc "$keepc / $offc" 3) x"
  done
fi

if [[ $only != throughput ]]; then
  for ((r = 1; r <= rounds; r++)); do
    for b in "${bins[@]}"; do
      run_prune "$b.mem.prune" "${bin[$b]}" 2
      run_prune "$b.mem.none" "${bin[$b]}" 1000000
      run_prune "$b.db.prune" "${bin[$b]}" 2 --db
      run_prune "$b.db.none" "${bin[$b]}" 1000000 --db
    done
  done
  for b in "${bins[@]}"; do
    for where in mem db; do
      for what in prune none; do
        l=$b.$where.$what
        echo "#   $l: worst gap ${runs[$l.max]}ms; p99.9 ${runs[$l.p999]}ms;" \
          "gaps > 8 ms ${runs[$l.over8]}; > 10 ms ${runs[$l.over10]}${runs[$l.left]:+; done rows left ${runs[$l.left]}}"
        echo "prune_${b}_${where}_${what}_gap_max $(median ${runs[$l.max]}) ms"
        echo "prune_${b}_${where}_${what}_gaps_over_10ms $(median ${runs[$l.over10]}) gaps"
      done
      worst=$(printf '%s\n' ${runs[$b.$where.prune.max]} | sort -g | tail -n 1)
      v=MISSED
      awk -v m="$worst" 'BEGIN { exit !(m <= 10) }' && v=met
      echo "# prune_${b}_${where}: worst gap over all runs while pruning $worst ms, bar <= 10 ms: $v"
    done
  done
fi
