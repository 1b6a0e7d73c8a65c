#!/usr/bin/env bash
# Group limits from Lua (issue 11), through the Release wqrun binary:
# bench/groups.lua runs JOBS no-op jobs through a handler queue, one case
# per process, the cases interleaved for ROUNDS rounds:
#   w8: plain | groups 1000 | group_of 1000 | onegroup |
#       rate 1e6 (default burst, 1e6) | rate 1e6 burst 100 | rate 1e6 burst 1
#   w1: plain | groups 1000
# (8 or 1 workers; `groups`: 1,000 groups with group_limit {concurrency = 1};
# `rate`: every job in one group with group_limit {rate = 1e6, burst = B}).
# Every run is printed on a `#` line, then the MEDIAN of each result as
# `<name> <value> <unit>`, and ratios of the medians: grouped/plain jobs/s
# (bar >= 0.70) and rate/plain time per job (bar <= 1.2), with the per-job
# overhead in ns. Exits 0 when it ran (bars met or not), 1 on an error.
# Environment (optional):
#   WQRUN  wqrun binary (default: build-bench/wqrun, built Release here)
#   JOBS   jobs per run (1000000)   ROUNDS  rounds of all cases (5)
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C # "." as the decimal point

jobs=${JOBS:-1000000}
rounds=${ROUNDS:-5}
[[ $jobs =~ ^[1-9][0-9]*$ && $rounds =~ ^[1-9][0-9]*$ ]] || {
  echo "bench_groups: JOBS and ROUNDS must be positive integers" >&2
  exit 1
}

. bench/lib/release.sh
if [[ -z ${WQRUN:-} ]]; then
  release_build bench_groups wqrun
  WQRUN=build-bench/wqrun
fi

# name|workers|groups.lua arguments after JOBS WORKERS
cases=(
  "plain_w8|8|plain"
  "groups1k_w8|8|groups 1000"
  "group_of1k_w8|8|group_of 1000"
  "onegroup_w8|8|onegroup"
  "rate1e6_burst1e6_w8|8|rate 1000000"
  "rate1e6_burst100_w8|8|rate 1000000 100"
  "rate1e6_burst1_w8|8|rate 1000000 1"
  "plain_w1|1|plain"
  "groups1k_w1|1|groups 1000"
)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/wq-bench-groups.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM # still removes $tmp
all=$tmp/all # "<case>_<metric> <value> <unit>" for every run

echo "# bench_groups (group limits from Lua: grouped and rate-limited no-op jobs vs ungrouped)"
echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S +0000')"
echo "# machine: nproc $(nproc), cpu $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# binary $WQRUN; $jobs jobs per run; $rounds rounds of ${#cases[@]} cases, interleaved; medians reported"
echo "# run = jobs/s from the last add to the last job done; end_to_end includes the adds;" \
  "cpu_per_job = process CPU time over the run phase / jobs"

for ((r = 1; r <= rounds; r++)); do
  for c in "${cases[@]}"; do
    IFS='|' read -r name workers args <<<"$c"
    read -r -a argv <<<"$args"
    if ! "$WQRUN" --quiet bench/groups.lua "${argv[0]}" "$jobs" "$workers" "${argv[@]:1}" \
      >"$tmp/out" 2>"$tmp/err"; then
      echo "bench_groups: wqrun bench/groups.lua $args ($name) failed: $(head -c 2000 "$tmp/err")" >&2
      exit 1
    fi
    awk -v n="$name" 'match($1, /_(add|run|end_to_end|cpu_per_job)$/) {
      print n "_" substr($1, RSTART + 1), $2, $3 }' "$tmp/out" >>"$all"
    echo "#   round $r $name: $(awk '{ sub(/^groups_/, "", $1); printf "%s%s %s %s", (NR > 1 ? ", " : ""), $1, $2, $3 }' "$tmp/out")"
  done
done

# The median of the numbers given.
median() {
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
    END { if (NR % 2) printf "%.6g", v[(NR + 1) / 2]; else printf "%.6g", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
declare -A med
while read -r key unit; do
  mapfile -t vals < <(awk -v k="$key" '$1 == k { print $2 }' "$all")
  med[$key]=$(median "${vals[@]}")
  echo "groups_$key ${med[$key]} $unit"
done < <(awk '!seen[$1]++ { print $1, $3 }' "$all")

calc() { awk "BEGIN { printf \"%.${2:-3}f\", $1 }"; }
verdict() { if awk "BEGIN { exit !($1) }"; then echo met; else echo MISSED; fi; }

for w in w8 w1; do
  run=$(calc "${med[groups1k_${w}_run]} / ${med[plain_${w}_run]}")
  e2e=$(calc "${med[groups1k_${w}_end_to_end]} / ${med[plain_${w}_end_to_end]}")
  cpu=$(calc "${med[plain_${w}_cpu_per_job]} / ${med[groups1k_${w}_cpu_per_job]}")
  echo "groups_groups1k_over_plain_${w}_run $run ratio"
  echo "groups_groups1k_over_plain_${w}_end_to_end $e2e ratio"
  echo "groups_groups1k_over_plain_${w}_cpu $cpu ratio"
  echo "# bar 1,000 groups (concurrency 1) >= 0.70 x ungrouped jobs/s, $w: run $run $(verdict "$run >= 0.70"), end to end $e2e $(verdict "$e2e >= 0.70")"
done
for b in burst1e6 burst100 burst1; do
  k=rate1e6_${b}_w8
  run=$(calc "${med[plain_w8_run]} / ${med[${k}_run]}")
  e2e=$(calc "${med[plain_w8_end_to_end]} / ${med[${k}_end_to_end]}")
  over=$(calc "1e9 / ${med[${k}_run]} - 1e9 / ${med[plain_w8_run]}" 1)
  cpu=$(calc "${med[${k}_cpu_per_job]} - ${med[plain_w8_cpu_per_job]}" 1)
  echo "groups_${k}_cost_over_plain_run $run ratio"
  echo "groups_${k}_cost_over_plain_end_to_end $e2e ratio"
  echo "groups_${k}_overhead_per_job $over ns"
  echo "groups_${k}_cpu_overhead_per_job $cpu ns"
  echo "# bar one group at rate 1e6/s ($b) <= 1.2 x ungrouped time per job: run $run $(verdict "$run <= 1.2"), end to end $e2e $(verdict "$e2e <= 1.2")"
done
echo "# note: ungrouped runs faster than 1e6 jobs/s, so a rate of 1e6/s that binds (small burst) cannot reach 1.2x; see bench/RESULTS.md"
