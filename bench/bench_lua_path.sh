#!/usr/bin/env bash
# Lua-path benchmark of the queue (what users run): bench/lua_path.lua times
# q:add / q:get / q:done from a Lua script through the Release wqrun, one
# mode per process:
#   a        add N distinct keys, then N x (get, done)
#   afly     mode a with the keys made in the loop ("key:" .. i, garbage once
#            added: a script that builds its keys on the fly)
#   a1       N x (add, get, done), depth 1
#   c        N dedup adds over 1,000 keys
#   table    N plain Lua table writes on the same 1,000 keys (c's baseline)
#   method   N calls of a C method through a metatable (Lua's own k:len()) on
#            the same keys: the floor of any q:add, the Lua VM's own cost
#   handler  N no-op jobs through a handler queue with 1 worker
# The modes run interleaved (a, afly, a1, c, table, method, handler, a, ...) for
# ROUNDS rounds; every run is printed on a `#` line, then the MEDIAN per result
# as `<name> <value> <unit>`, the ratios c / table and c / method of the
# medians (lua_path_c_over_table, lua_path_c_over_method; c - method is what
# q:add costs beyond calling a method at all), and one `# goal ...: met|missed`
# line per goal: a <= 480 ns/item, a1 <= 197 ns/item, c <= 52 ns/add,
# c <= 2 x table; with a BASE also issue 30's, as speed-ups over BASE: a
# >= 1.8, a1 and c >= 1.4, handler >= 1.5.
# The client-go figures printed next to them are the reference numbers from
# the issue (client-go v0.26.15, Go 1.19, medians on this machine model),
# NOT measured by this script: client-go cannot be installed here (no Debian
# package, no Go module proxy). Exits 0 when it ran (goals met or not), 1 on
# a real error. Environment (optional):
#   WQRUN   wqrun binary (default: build-bench/wqrun, built Release here)
#   N       items per run (1000000)   ROUNDS  rounds of all modes (7)
#   BASE    a commit (or BASE_WQRUN a binary) to compare with in the same run:
#           every run of a mode is followed by the same run of the base build
#           (the order swapped every other round); its medians are printed as
#           base_<name>, and per mode the speed-up base time / this time as
#           lua_path_<mode>_speedup (> 1: this build is faster). BASE is built
#           Release in a git worktree under $TMPDIR (kept for the next run).
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C # "." as the decimal point

n=${N:-1000000}
rounds=${ROUNDS:-7}
modes=(a afly a1 c table method handler)
[[ $n =~ ^[1-9][0-9]*$ && $rounds =~ ^[1-9][0-9]*$ ]] || {
  echo "bench_lua_path: N and ROUNDS must be positive integers" >&2
  exit 1
}

# client-go workqueue reference, ns per item (from the issue; not measured here).
ref_a=1439
ref_a1=197
ref_c=52.5
# Goals for wqrun from Lua.
goal_a=480
goal_a1=197
goal_c=52
goal_c_over_table=2

. bench/lib/release.sh
if [[ -z ${WQRUN:-} ]]; then
  release_build bench_lua_path wqrun
  WQRUN=build-bench/wqrun
fi
[[ -x $WQRUN ]] || {
  echo "bench_lua_path: $WQRUN is not an executable" >&2
  exit 1
}
base=${BASE_WQRUN:-}
[[ -z $base && -n ${BASE:-} ]] && base=$(base_build bench_lua_path "$BASE")
[[ -z $base || -x $base ]] || {
  echo "bench_lua_path: $base is not an executable" >&2
  exit 1
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/wq-bench-lua-path.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM # still removes $tmp
all=$tmp/all # every result line of every run, in order

echo "# bench_lua_path (wqrun queue from Lua: add/get/done vs client-go's workqueue)"
echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S +0000')"
echo "# machine: nproc $(nproc), cpu $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)," \
  "ram $(awk '/^MemTotal:/ { printf "%d", $2 / 1024 }' /proc/meminfo) MiB, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# binary $WQRUN; N $n; $rounds rounds of modes ${modes[*]}, interleaved; medians reported"
[[ -n $base ]] && echo "# base binary $base (${BASE:-given}): each run followed or preceded by the same run of it"
echo "# time: wq.now() (monotonic) around the measured loop only; keys \"key:<i>\" built before timing"

# Arithmetic on decimals.
calc() { awk "BEGIN { printf \"%.${2:-2}f\", $1 }"; }
# The median of the numbers given (mean of the middle two for an even count).
median() {
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
    END { if (NR % 2) printf "%.6g", v[(NR + 1) / 2]; else printf "%.6g", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# The median of result NAME over all runs.
median_of() {
  local vals
  mapfile -t vals < <(awk -v k="$1" '$1 == k { print $2 }' "$all")
  ((${#vals[@]} > 0)) || {
    echo "bench_lua_path: no result $1" >&2
    exit 1
  }
  median "${vals[@]}"
}

# run_mode BINARY MODE LABEL: one run; its result lines go to $all (with LABEL "base": as base_<name>).
run_mode() {
  local bin=$1 mode=$2 label=$3 out=$tmp/out
  if ! "$bin" --quiet bench/lua_path.lua "$mode" "$n" >"$out" 2>"$tmp/err"; then
    echo "bench_lua_path: $bin bench/lua_path.lua $mode $n failed: $(head -c 2000 "$tmp/err")" >&2
    exit 1
  fi
  grep -q "^lua_path_$mode " "$out" || {
    echo "bench_lua_path: mode $mode printed no result: $(head -c 2000 "$out")" >&2
    exit 1
  }
  [[ $label == base ]] && sed -i 's/^/base_/' "$out"
  echo "#   round $r $mode${base:+ ($label)}: $(awk '{ printf "%s%s %s %s", (NR > 1 ? ", " : ""), $1, $2, $3 }' "$out")"
  cat "$out" >>"$all"
  if [[ $label == this ]]; then
    case $mode in
    c) round_c=$(awk '$1 == "lua_path_c" { print $2 }' "$out") ;;
    table) round_table=$(awk '$1 == "lua_path_table" { print $2 }' "$out") ;;
    method) round_method=$(awk '$1 == "lua_path_method" { print $2 }' "$out") ;;
    esac
  fi
}

for ((r = 1; r <= rounds; r++)); do
  for mode in "${modes[@]}"; do
    if [[ -z $base ]]; then
      run_mode "$WQRUN" "$mode" this
    elif ((r % 2)); then
      run_mode "$WQRUN" "$mode" this
      run_mode "$base" "$mode" base
    else
      run_mode "$base" "$mode" base
      run_mode "$WQRUN" "$mode" this
    fi
  done
  echo "#   round $r c / table: $(calc "$round_c / $round_table" 3), c / method: $(calc "$round_c / $round_method" 3)"
done

# Medians, one line per result name, in the order the first round printed them.
declare -A med
while read -r name unit; do
  med[$name]=$(median_of "$name")
  echo "$name ${med[$name]} $unit"
done < <(awk '!seen[$1]++ { print $1, $3 }' "$all")

ratio=$(calc "${med[lua_path_c]} / ${med[lua_path_table]}" 3)
echo "lua_path_c_over_table $ratio ratio"
echo "lua_path_c_over_method $(calc "${med[lua_path_c]} / ${med[lua_path_method]}" 3) ratio"
echo "lua_path_c_beyond_method $(calc "${med[lua_path_c]} - ${med[lua_path_method]}" 2) ns/add"
if [[ -n $base ]]; then
  for mode in "${modes[@]}"; do
    [[ $mode == table || $mode == method ]] && continue
    echo "lua_path_${mode}_speedup $(calc "${med[base_lua_path_$mode]} / ${med[lua_path_$mode]}" 3) base/this"
  done
fi

echo "# client-go v0.26.15 (Go 1.19) reference from the issue, NOT measured in this run:" \
  "a $ref_a ns/item, a1 $ref_a1 ns/item, c $ref_c ns/add"
# goal LABEL BAR UNIT WHAT VALUE [REFERENCE]: prints whether VALUE <= BAR.
goal() {
  local label=$1 bar=$2 unit=$3 what=$4 value=$5 ref=${6:-} verdict=missed extra
  if awk -v a="$value" -v b="$bar" 'BEGIN { exit !(a <= b) }'; then verdict=met; fi
  extra="$what $value $unit"
  [[ -n $ref ]] && extra+="; client-go reference $ref, wqrun/client-go $(calc "$value / $ref" 2)"
  echo "# goal $label <= $bar $unit: $verdict ($extra)"
}
goal a "$goal_a" ns median "${med[lua_path_a]}" "$ref_a"
goal a1 "$goal_a1" ns median "${med[lua_path_a1]}" "$ref_a1"
goal c "$goal_c" ns median "${med[lua_path_c]}" "$ref_c"
goal c_over_table "$goal_c_over_table" x "ratio of the medians" "$ratio"
# speedup_goal MODE BAR: issue 30's goals, a speed-up over BASE of at least BAR.
speedup_goal() {
  local s verdict=missed
  s=$(calc "${med[base_lua_path_$1]} / ${med[lua_path_$1]}" 3)
  awk -v a="$s" -v b="$2" 'BEGIN { exit !(a >= b) }' && verdict=met
  echo "# goal ${1}_speedup >= $2 over ${BASE:-the base}: $verdict (ratio of the medians $s)"
}
if [[ -n $base ]]; then
  speedup_goal a 1.8
  speedup_goal a1 1.4
  speedup_goal c 1.4
  speedup_goal handler 1.5
fi
