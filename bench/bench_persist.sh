#!/usr/bin/env bash
# Persistence benchmark (issue 4). With the Release wqrun, in a temporary
# directory (removed at exit):
#   1. bench/persist.lua run: N no-op jobs (add all, then run all) in memory,
#      with --db --sync normal and with --db --sync full: jobs/s end to end
#      and the ratio to the in-memory run;
#   2. N pending items written to a state file (persist.lua fill): the file's
#      size, then its restore (persist.lua restore), timed from the moment
#      the process is started to the moment the restored queue is ready,
#      with the file in the page cache and again after evicting it;
#   3. the plain SQLite reference on the same disk (bench_sqlite): rows/s of
#      1000-row insert (and delete) transactions into an items-shaped table.
# Each wqrun measurement runs PERSIST_REPEAT times and the best is reported
# (all runs on a "#   ... runs:" line). Prints "<name> <value> <unit>" lines,
# then one line per bar from the issue: --sync normal >= 250,000 jobs/s,
# --sync full >= 50,000 jobs/s, restore of 1,000,000 items <= 2 s. Exits 0
# when it ran (bars missed or not), 1 on a real error. Environment (optional):
#   WQRUN           wqrun binary (default: build-bench/wqrun, built Release here)
#   BENCH_SQLITE    bench_sqlite binary (default: build-bench/bench/bench_sqlite)
#   PERSIST_JOBS    jobs / items (1000000)     PERSIST_REPEAT  runs per measurement (2)
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C # "." as the decimal point, in $EPOCHREALTIME too

jobs=${PERSIST_JOBS:-1000000}
repeat=${PERSIST_REPEAT:-2}
bar_normal=250000
bar_full=50000
bar_restore=2
[[ $jobs =~ ^[1-9][0-9]*$ && $repeat =~ ^[1-9][0-9]*$ ]] || {
  echo "bench_persist: PERSIST_JOBS and PERSIST_REPEAT must be positive integers" >&2
  exit 1
}

# Build what is not given.
. bench/lib/release.sh
if [[ -z ${WQRUN:-} || -z ${BENCH_SQLITE:-} ]]; then
  release_build bench_persist wqrun bench_sqlite
fi
WQRUN=${WQRUN:-build-bench/wqrun}
BENCH_SQLITE=${BENCH_SQLITE:-build-bench/bench/bench_sqlite}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/wq-bench-persist.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM # still removes $tmp
db=$tmp/state.db

# Arithmetic on decimals.
calc() { awk "BEGIN { printf \"%.${2:-0}f\", $1 }"; }
# The value of NAME in a file of "<name> <value> <unit>" lines.
value() { awk -v k="$1" '$1 == k { print $2 }' "$2"; }
# The largest (or, with "min", smallest) of the numbers given.
best() {
  local how=$1
  shift
  printf '%s\n' "$@" | sort -g | if [[ $how == min ]]; then head -n 1; else tail -n 1; fi
}
size_of() { stat -c %s "$1"; }

# run_wqrun OUT [options and script arguments...]: runs wqrun with stdout to OUT
# and sets `started` and `wall` (seconds, from just before the start to the end).
run_wqrun() {
  local out=$1
  shift
  started=$EPOCHREALTIME
  if ! "$WQRUN" --quiet "$@" >"$out" 2>"$tmp/err"; then
    echo "bench_persist: wqrun $* failed: $(head -c 2000 "$tmp/err")" >&2
    exit 1
  fi
  wall=$(calc "$EPOCHREALTIME - $started" 3)
}

# run LABEL [wqrun options...]: N no-op jobs end to end, best of `repeat`
# runs (a fresh state file for each). Prints the best run's lines and sets
# `rate` to its end-to-end jobs/s.
run() {
  local label=$1
  shift
  local i rates=() walls=() best_wall=
  rate=0
  for ((i = 0; i < repeat; i++)); do
    rm -f "$db" "$db-wal" "$db-shm"
    run_wqrun "$tmp/run.out" "$@" bench/persist.lua "$jobs" run "$label"
    local r
    r=$(value "${label}_end_to_end" "$tmp/run.out")
    rates+=("$(calc "$r")")
    walls+=("$wall")
    if awk -v a="$r" -v b="$rate" 'BEGIN { exit !(a > b) }'; then
      rate=$r
      cp "$tmp/run.out" "$tmp/best.out"
      best_wall=$wall
    fi
  done
  cat "$tmp/best.out"
  echo "${label}_process_wall $best_wall s"
  echo "#   ${label}_end_to_end runs: ${rates[*]} jobs/s (process wall ${walls[*]} s)"
  if [[ $* == *--db* ]]; then
    echo "${label}_file_after_run $(size_of "$db") bytes"
    if command -v sqlite3 >/dev/null; then
      echo "${label}_items_left $(sqlite3 "$db" 'SELECT count(*) FROM items') rows"
    fi
  fi
}

# verdict NAME MEASURED OP BAR UNIT [NOTE]: one "# NAME: ... bar ...: met|MISSED" line.
verdict() {
  local v=MISSED
  awk -v m="$2" -v b="$4" -v op="$3" 'BEGIN { exit !(op == ">=" ? m >= b : m <= b) }' && v=met
  ((jobs == 1000000)) || v="$v (but measured with $jobs, not 1,000,000)"
  echo "# $1: $2 $5${6:+ ($6)}, bar $3 $4 $5: $v"
}

echo "# bench_persist (wqrun --db: $jobs no-op jobs end to end, restore of $jobs items)"
echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S +0000')"
echo "# machine: nproc $(nproc), cpu $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# files in $tmp ($(df -PT "$tmp" | awk 'NR == 2 { print $2 }')); binary $WQRUN"
echo "# repeat: each wqrun measurement runs $repeat times; best run reported"
((jobs == 1000000)) || echo "# note: PERSIST_JOBS=$jobs; the bars are for 1,000,000"

# 1. End to end: in memory, --sync normal, --sync full.
run persist_memory
mem=$rate
run persist_normal --db "$db" --sync normal
normal=$rate
run persist_full --db "$db" --sync full
full=$rate
echo "persist_normal_vs_memory $(calc "$normal / $mem" 3) x"
echo "persist_full_vs_memory $(calc "$full / $mem" 3) x"

# 2. Restore. The baseline is the same process on an empty state file.
rm -f "$db" "$db-wal" "$db-shm"
run_wqrun "$tmp/r.out" --db "$db" bench/persist.lua 0 restore persist_baseline
base=$(calc "$(value persist_baseline_restore_ready_unix "$tmp/r.out") - $started" 3)
rm -f "$db" "$db-wal" "$db-shm"
run_wqrun "$tmp/fill.out" --db "$db" bench/persist.lua "$jobs" fill persist
cat "$tmp/fill.out"
echo "persist_fill_process_wall $wall s"
size=$(size_of "$db")
[[ -e $db-wal ]] && size=$((size + $(size_of "$db-wal")))
echo "persist_file_size $size bytes"
echo "persist_file_bytes_per_item $(calc "$size / $jobs" 1) bytes"

# restore_runs NAME [evict]: best of `repeat` restores; with evict, the file's
# pages are dropped from the page cache first (a restart after a reboot).
restore_runs() {
  local name=$1 evict=${2:-} i ready=() walls=() inq=()
  for ((i = 0; i < repeat; i++)); do
    if [[ -n $evict ]]; then
      sync "$db"                                       # written back: clean pages can be dropped
      dd if="$db" iflag=nocache count=0 status=none || # POSIX_FADV_DONTNEED on the whole file
        echo "# ${name}: could not evict the file from the page cache" >&2
    fi
    run_wqrun "$tmp/r.out" --db "$db" bench/persist.lua "$jobs" restore persist
    ready+=("$(calc "$(value persist_restore_ready_unix "$tmp/r.out") - $started" 3)")
    walls+=("$wall")
    inq+=("$(value persist_restore_in_queue_call "$tmp/r.out")")
  done
  restore=$(best min "${ready[@]}")
  echo "${name} $restore s"
  echo "${name}_process_wall $(best min "${walls[@]}") s"
  echo "${name}_in_queue_call $(best min "${inq[@]}") s"
  echo "#   ${name} runs: start to ready ${ready[*]} s; process wall ${walls[*]} s;" \
    "inside wq.queue() ${inq[*]} s; $(value persist_restore_rss "$tmp/r.out") MiB RSS"
}
echo "persist_restore_baseline_empty_file $base s"
restore_runs persist_restore_cold evict
cold=$restore
restore_runs persist_restore
warm=$restore

# 3. The plain SQLite reference, on the same file system.
"$BENCH_SQLITE" --rows "$jobs" --dir "$tmp" | tee "$tmp/sqlite.out"
ins=$(value sqlite_insert_batch1000_normal "$tmp/sqlite.out")
insfull=$(value sqlite_insert_batch1000_full "$tmp/sqlite.out")
pair=$(value sqlite_insert_then_delete_batch1000_normal "$tmp/sqlite.out")
echo "persist_normal_vs_sqlite_insert $(calc "$normal / $ins" 3) x"
echo "persist_normal_vs_sqlite_insert_then_delete $(calc "$normal / $pair" 3) x"
echo "persist_full_vs_sqlite_insert $(calc "$full / $insfull" 3) x"

verdict persist_normal_end_to_end "$(calc "$normal")" ">=" "$bar_normal" jobs/s
verdict persist_full_end_to_end "$(calc "$full")" ">=" "$bar_full" jobs/s
verdict persist_restore "$warm" "<=" "$bar_restore" s "process start to queue ready, file in the page cache"
verdict persist_restore_cold "$cold" "<=" "$bar_restore" s "the same, file evicted from the page cache first"
