#!/usr/bin/env bash
# Builds the benchmarks in build-bench/ (Release, no tests) and runs them:
# every executable build-bench/bench/bench_*, then every bench/*.sh. The
# combined output is also written to bench/last-run.txt. Arguments are
# passed to each bench_* program (bench_engine takes case names; see
# `build-bench/bench/bench_engine --help`). Record results in bench/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."

case ${1:-} in
-h | --help)
  sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
  ;;
esac

if [[ -f scripts/deps.sh ]]; then
  bash scripts/deps.sh
fi

dir=build-bench
jobs=$(nproc 2>/dev/null || echo 2)
# Only the benchmark programs (and what they link): one target per bench/bench_*.c.
targets=()
for src in bench/bench_*.c; do
  [[ -e $src ]] && targets+=("$(basename "$src" .c)")
done
((${#targets[@]} > 0)) || {
  echo "bench.sh: no bench/bench_*.c programs" >&2
  exit 1
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { cmake -S . -B "$dir" --log-level=WARNING -DCMAKE_BUILD_TYPE=Release -DWQ_TESTS=OFF &&
  cmake --build "$dir" -j "$jobs" --target "${targets[@]}"; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "bench.sh: build failed" >&2
  exit 1
fi

out=bench/last-run.txt
run() {
  local status=0
  shopt -s nullglob
  for prog in "$dir"/bench/bench_*; do
    [[ -f $prog && -x $prog ]] || continue
    echo "# --- $prog"
    "$prog" "$@" || status=1
  done
  for script in bench/*.sh; do
    echo "# --- $script"
    bash "$script" || status=1
  done
  return $status
}

status=0
run "$@" 2>&1 | tee "$out" || status=1
echo "bench.sh: output saved to $out" >&2
exit "$status"
