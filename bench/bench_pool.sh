#!/usr/bin/env bash
# Process pool benchmark (SPEC 10.1): no-op jobs/s through a pool of 4
# python3 processes (bench/pool.lua pool) against `wq.exec{"python3", ...}`
# per job (bench/pool.lua exec), the two interleaved in the same run, for
# ROUNDS rounds. Prints each round's jobs/s and pool/exec ratio, then the
# range over the rounds and one `# goal ...: met|missed` line per goal:
# pool >= 100 x exec, pool >= 20,000 jobs/s. Exits 0 when it ran (goals met
# or not), 1 on a real error. Environment (optional):
#   WQRUN       wqrun binary (default: build-bench/wqrun, built Release here)
#   N_POOL      jobs per pool run (200000)   N_EXEC  jobs per exec run (200)
#   ROUNDS      rounds (3)
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

n_pool=${N_POOL:-200000}
n_exec=${N_EXEC:-200}
rounds=${ROUNDS:-3}
command -v python3 >/dev/null || {
  echo "bench_pool: needs python3" >&2
  exit 1
}

. bench/lib/release.sh
if [[ -z ${WQRUN:-} ]]; then
  release_build bench_pool wqrun
  WQRUN=build-bench/wqrun
fi
[[ -x $WQRUN ]] || {
  echo "bench_pool: $WQRUN is not an executable" >&2
  exit 1
}

rate() { # MODE N: jobs/s of one run
  local out
  out=$("$WQRUN" --quiet bench/pool.lua "$1" "$2") || {
    echo "bench_pool: the $1 run failed" >&2
    exit 1
  }
  awk -v m="pool_$1_rate" '$1 == m { print $2 }' <<<"$out"
}

pools=() execs=() ratios=()
echo "# $(nproc) CPUs, $(date -u +%Y-%m-%d), $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
for ((r = 1; r <= rounds; r++)); do
  p=$(rate pool "$n_pool")
  e=$(rate exec "$n_exec")
  ratio=$(awk -v p="$p" -v e="$e" 'BEGIN { printf "%.0f", p / e }')
  pools+=("$p") execs+=("$e") ratios+=("$ratio")
  printf '# round %d: pool %.0f jobs/s, exec %.1f jobs/s, pool/exec %s\n' "$r" "$p" "$e" "$ratio"
done
range() { printf '%s\n' "$@" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s-%s", lo, hi }'; }
min() { printf '%s\n' "$@" | sort -g | head -1; }
echo "pool_rate $(range "${pools[@]}") jobs/s"
echo "exec_rate $(range "${execs[@]}") jobs/s"
echo "pool_over_exec $(range "${ratios[@]}")"
goal() { # WHAT VALUE MIN
  if awk -v v="$2" -v m="$3" 'BEGIN { exit !(v >= m) }'; then s=met; else s=missed; fi
  echo "# goal $1 (worst round $2, bar $3): $s"
}
goal "pool >= 100 x exec" "$(min "${ratios[@]}")" 100
goal "pool >= 20000 jobs/s" "$(min "${pools[@]}")" 20000
